package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// ErrPatchRefused is returned by PatchBytes for a patch it will not read:
// over protocol.MaxPatchBytes, or not the size and SHA-256 its reference
// says.
var ErrPatchRefused = errors.New("patch refused")

// PatchBytes reads the patch ref names from the patches bucket. It asks
// the object's size first and refuses, without downloading it, a patch
// over protocol.MaxPatchBytes or whose size is not ref.Size; it refuses
// one whose SHA-256 is not ref.SHA256 after reading it.
func (b *Bus) PatchBytes(ctx context.Context, ref protocol.PatchRef) ([]byte, error) {
	if ref.Size > protocol.MaxPatchBytes {
		return nil, fmt.Errorf("%w: %s: %s", ErrPatchRefused, ref.Object, protocol.PatchTooLarge(ref.Size))
	}
	info, err := b.Patches.GetInfo(ctx, ref.Object)
	if err != nil {
		return nil, fmt.Errorf("bus: patch %s: %w", ref.Object, err)
	}
	if size := int64(info.Size); size > protocol.MaxPatchBytes || size != ref.Size {
		return nil, fmt.Errorf("%w: %s is %d bytes; its reference says %d, and the limit is %d",
			ErrPatchRefused, ref.Object, size, ref.Size, int64(protocol.MaxPatchBytes))
	}
	data, err := b.Patches.GetBytes(ctx, ref.Object)
	if err != nil {
		return nil, fmt.Errorf("bus: patch %s: %w", ref.Object, err)
	}
	if int64(len(data)) != ref.Size {
		return nil, fmt.Errorf("%w: %s is %d bytes, its reference says %d", ErrPatchRefused, ref.Object, len(data), ref.Size)
	}
	if sum := sha256.Sum256(data); !strings.EqualFold(hex.EncodeToString(sum[:]), ref.SHA256) {
		return nil, fmt.Errorf("%w: %s has SHA-256 %x, its reference says %s", ErrPatchRefused, ref.Object, sum, ref.SHA256)
	}
	return data, nil
}
