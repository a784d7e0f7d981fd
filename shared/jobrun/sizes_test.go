package jobrun

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Artifacts are bounded where they are uploaded: a log over MaxLogBytes
// is stored capped, its start kept and a marker saying how much was
// dropped; a patch over protocol.MaxPatchBytes is refused and not stored.
func TestUploadsAreCapped(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, time.Minute)
	b, err := bus.Open(ctx, testkit.NATS(t), t.Name(), bus.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	big := bytes.Repeat([]byte("0123456789abcdef"), MaxLogBytes/16+1000)
	if err := UploadLog(ctx, b, "wf/n/log", big); err != nil {
		t.Fatal(err)
	}
	got, err := b.Logs.GetBytes(ctx, "wf/n/log")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > MaxLogBytes || !bytes.HasPrefix(big, got[:MaxLogBytes-128]) ||
		!strings.HasSuffix(string(got), "bytes dropped\n") || !strings.Contains(string(got), "[supervisor] log capped at 10485760 bytes; 16128 bytes dropped") {
		t.Errorf("stored log of %d bytes ends %q; want at most %d, its start, and the marker", len(got), got[max(0, len(got)-100):], MaxLogBytes)
	}

	if _, err := UploadPatch(ctx, b, "n", "wf/n/a1/1.patch", make([]byte, protocol.MaxPatchBytes+1)); err == nil ||
		!strings.Contains(err.Error(), "patch_too_large") {
		t.Errorf("uploading an oversized patch: %v; want it refused", err)
	}
	if _, err := b.Patches.GetInfo(ctx, "wf/n/a1/1.patch"); err == nil {
		t.Error("the oversized patch was stored")
	}
}

// Logs and patches of any size are stored whole, in chunks no larger than
// themselves (at most the store's default, 128 KiB).
func TestUploadsRoundTripInFittingChunks(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, time.Minute)
	b, err := bus.Open(ctx, testkit.NATS(t), t.Name(), bus.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, c := range []struct {
		size          int
		chunk, chunks uint32
	}{
		{0, 1, 0}, {1, 1, 1}, {700, 700, 1}, {maxChunk, maxChunk, 1}, {maxChunk + 1, maxChunk, 2}, {3*maxChunk + 5, maxChunk, 4},
	} {
		data := make([]byte, c.size)
		for i := range data {
			data[i] = byte('a' + i%26)
		}
		name := "wf/n/a1/" + strings.Repeat("x", 1+c.size%7)
		if _, err := UploadPatch(ctx, b, "n", name+".patch", data); err != nil {
			t.Fatalf("%d bytes: %v", c.size, err)
		}
		if err := UploadLog(ctx, b, name+".log", data); err != nil {
			t.Fatalf("%d bytes: %v", c.size, err)
		}
		for store, obj := range map[string]string{"patches": name + ".patch", "logs": name + ".log"} {
			s := b.Patches
			if store == "logs" {
				s = b.Logs
			}
			got, err := s.GetBytes(ctx, obj)
			if err != nil {
				t.Fatalf("%s %s: %v", store, obj, err)
			}
			if !bytes.Equal(got, data) {
				t.Errorf("%s %s: got %d bytes back, want the %d stored", store, obj, len(got), len(data))
			}
			info, err := s.GetInfo(ctx, obj)
			if err != nil {
				t.Fatal(err)
			}
			if info.Opts == nil || info.Opts.ChunkSize != c.chunk || info.Chunks != c.chunks {
				t.Errorf("%s %s of %d bytes: chunk size %+v, %d chunks; want %d, %d", store, obj, c.size, info.Opts, info.Chunks, c.chunk, c.chunks)
			}
		}
	}
}
