package demo

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/supervisorhq/supervisor/shared/workspace"
)

// TestSampleRepoIsTheSameEveryTime checks that two demos' sample
// repositories have the same commit, so a fleet gives them one repository
// id (one mirror, one pool of workspace slots), and that the second is not
// the first's directory. The two are made at different moments, as the
// environment's git dates say, the second with a user configuration that
// would change the commit.
func TestSampleRepoIsTheSameEveryTime(t *testing.T) {
	ctx := context.Background()
	var heads, ids []string
	for i, name := range []string{"a", "b"} {
		date := []string{"2030-05-01T10:00:00Z", "2031-07-02T11:00:00Z"}[i]
		t.Setenv("GIT_AUTHOR_DATE", date)
		t.Setenv("GIT_COMMITTER_DATE", date)
		if i == 1 {
			// A user configuration that would change the commit.
			cfg := filepath.Join(t.TempDir(), "gitconfig")
			if err := os.WriteFile(cfg, []byte("[i18n]\n\tcommitEncoding = ISO-8859-1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("GIT_CONFIG_GLOBAL", cfg)
		}
		dir := filepath.Join(t.TempDir(), name)
		if err := WriteRepo(ctx, dir); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			t.Fatalf("sample repository has no go.mod: %v", err)
		}
		head, err := workspace.ResolveCommit(ctx, dir, "HEAD")
		if err != nil {
			t.Fatal(err)
		}
		id, err := workspace.RepoID(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		heads, ids = append(heads, head), append(ids, id)
	}
	if heads[0] != heads[1] || ids[0] != ids[1] {
		t.Fatalf("two sample repositories differ: commits %v, ids %v", heads, ids)
	}
}
