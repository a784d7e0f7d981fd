package workspace

import "fmt"

// PatchConflictError is a job's patch that does not apply on top of the
// base and the patches before it; errors.Is(err, ErrConflict) holds.
type PatchConflictError struct {
	// NodeID and Object name the patch; Index is its place in the job's
	// list of patches.
	NodeID, Object string
	Index          int
	// Detail is git apply's own account (which files, which lines).
	Detail string
	err    error
}

func (e *PatchConflictError) Error() string {
	return fmt.Sprintf("%s: patch %s of node %s: %v", ErrConflict, e.Object, e.NodeID, e.err)
}

// Unwrap makes errors.Is(err, ErrConflict) true, and keeps git's error.
func (e *PatchConflictError) Unwrap() []error { return []error{ErrConflict, e.err} }
