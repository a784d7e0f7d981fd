package protocol

import "fmt"

// MaxPatchBytes caps one agent patch (32 MiB). A worker refuses to upload
// a larger patch (the round fails with PatchTooLarge's message), the
// coordinator refuses to gate or integrate one whose reference says it is
// larger and reads a patch only after checking the object's size
// (bus.PatchBytes), and runners refuse to download one whose reference is
// over it: a runaway agent's output cannot fill the coordinator's memory
// or the user's repository.
const MaxPatchBytes = 32 << 20

// PatchTooLarge says why a patch of size bytes is refused; a negative
// size is a patch whose making was stopped at the limit.
func PatchTooLarge(size int64) string {
	if size < 0 {
		return fmt.Sprintf("patch_too_large: the patch is over the %d-byte limit (MaxPatchBytes); "+
			"leave build outputs, dependencies and generated or binary files out of the change", int64(MaxPatchBytes))
	}
	return fmt.Sprintf("patch_too_large: the patch is %d bytes, over the %d-byte limit (MaxPatchBytes); "+
		"leave build outputs, dependencies and generated or binary files out of the change", size, int64(MaxPatchBytes))
}

// MaxBundleBytes caps a git bundle in the object store (1 GiB): the bundle
// of a submitted repository and a workflow's result bundle. The CLI makes
// none larger, the coordinator refuses a submission whose bundle is, and
// runners and the CLI check an object's size before downloading it, so a
// bundle that was put there by other means cannot fill a disk either.
const MaxBundleBytes = 1 << 30

// BundleTooLarge says why bundle name, of size bytes, is refused.
func BundleTooLarge(name string, size int64) string {
	return fmt.Sprintf("bundle_too_large: bundle %s is %d bytes, over the %d-byte limit (MaxBundleBytes); "+
		"a repository this large cannot be shipped to the fleet as a bundle", name, size, int64(MaxBundleBytes))
}
