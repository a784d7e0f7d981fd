package workspace

import (
	"fmt"
	"slices"
	"strings"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// PatchConflictError is a job's patch that does not apply on top of the
// base and the patches before it; errors.Is(err, ErrConflict) holds.
type PatchConflictError struct {
	// NodeID and Object name the patch; Before are the nodes whose
	// patches were applied before it, in order, each once.
	NodeID, Object string
	Before         []string
	// Detail is git apply's own account (which files, which lines).
	Detail string
	err    error
}

func (e *PatchConflictError) Error() string {
	return fmt.Sprintf("%s: patch %s of node %s: %v", ErrConflict, e.Object, e.NodeID, e.err)
}

// Unwrap makes errors.Is(err, ErrConflict) true, and keeps git's error.
func (e *PatchConflictError) Unwrap() []error { return []error{ErrConflict, e.err} }

// Clash says, in words for the node's feedback, which node's patch did not
// apply on top of what.
func (e *PatchConflictError) Clash() string {
	if len(e.Before) == 0 {
		return fmt.Sprintf("node %s's patch does not apply to the base", e.NodeID)
	}
	return fmt.Sprintf("node %s's patch does not apply on top of the base and the work of %s", e.NodeID, strings.Join(e.Before, ", "))
}

// nodesOf are the nodes patches come from, in order, each once.
func nodesOf(patches []protocol.PatchRef) []string {
	var out []string
	for _, p := range patches {
		if !slices.Contains(out, p.NodeID) {
			out = append(out, p.NodeID)
		}
	}
	return out
}
