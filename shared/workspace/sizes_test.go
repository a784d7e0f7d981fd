package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// DiffLimit stops at its limit with ErrDiffTooLarge, and returns the same
// patch as Diff when the change fits.
func TestDiffLimit(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	s, _, repo := uploadedRepo(t)
	m := newManager(t, t.TempDir(), s.bundles, s.patches)
	ws, err := m.Prepare(ctx, repo, nil, "wf1.big.a1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws.Dir, "big.txt"), []byte(strings.Repeat("a line of text\n", 2000)), 0o644); err != nil {
		t.Fatal(err)
	}
	full, err := ws.DiffLimit(ctx, 0)
	if err != nil || len(full) < 30000 {
		t.Fatalf("unlimited diff: %d bytes, %v", len(full), err)
	}
	if d, err := ws.DiffLimit(ctx, len(full)); err != nil || string(d) != string(full) {
		t.Errorf("diff limited to its own size: %d bytes, %v; want the whole patch", len(d), err)
	}
	if d, err := ws.DiffLimit(ctx, 1000); !errors.Is(err, ErrDiffTooLarge) || d != nil {
		t.Errorf("diff limited to 1000 bytes: %d bytes, %v; want ErrDiffTooLarge", len(d), err)
	}
}

// A bundle larger than the limit is refused before it is downloaded
// (SIZE-05): the error names the bundle and the limit, and nothing is
// fetched into the mirror.
func TestBundleOverLimitNotDownloaded(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	s, _, repo := uploadedRepo(t)
	c := &counting{Objects: s.bundles}
	m := newManager(t, t.TempDir(), c, s.patches)
	info, err := s.bundles.GetInfo(ctx, repo.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	m.maxBundle = int64(info.Size) - 1
	if _, err := m.Prepare(ctx, repo, nil, "wf1.a.a1"); err == nil || !strings.Contains(err.Error(), "bundle_too_large") ||
		!strings.Contains(err.Error(), repo.Bundle) {
		t.Fatalf("prepare with a bundle over the limit: %v; want bundle_too_large naming it", err)
	}
	if n := c.n.Load(); n != 0 {
		t.Fatalf("%d downloads of a bundle over the limit", n)
	}
	m.maxBundle = int64(info.Size)
	if _, err := m.Prepare(ctx, repo, nil, "wf1.a.a2"); err != nil {
		t.Fatalf("prepare with a bundle of exactly the limit: %v", err)
	}
}
