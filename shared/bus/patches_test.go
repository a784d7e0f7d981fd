package bus

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// PatchBytes reads a patch only when it is what its reference says and
// within protocol.MaxPatchBytes: an oversized reference, an object of
// another size and one with another SHA-256 are refused (ErrPatchRefused).
func TestPatchBytesBounded(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{})
	ctx := testkit.Context(t, 20*time.Second)
	data := []byte("diff --git a/x b/x\n")
	if _, err := b.Patches.PutBytes(ctx, "p", data); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	good := protocol.PatchRef{Object: "p", Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	if got, err := b.PatchBytes(ctx, good); err != nil || string(got) != string(data) {
		t.Fatalf("the patch as its reference says: %q, %v", got, err)
	}
	for name, ref := range map[string]protocol.PatchRef{
		"over the limit": {Object: "p", Size: protocol.MaxPatchBytes + 1, SHA256: good.SHA256},
		"another size":   {Object: "p", Size: 3, SHA256: good.SHA256},
		"another digest": {Object: "p", Size: good.Size, SHA256: "00"},
	} {
		if _, err := b.PatchBytes(ctx, ref); !errors.Is(err, ErrPatchRefused) {
			t.Errorf("%s: %v; want ErrPatchRefused", name, err)
		}
	}
}
