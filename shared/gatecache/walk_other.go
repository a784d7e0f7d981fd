//go:build !linux

package gatecache

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitindex"
)

// walkSupported: outside Linux the tree is always computed by git.
const walkSupported = false

func walkIndex(context.Context, string, []gitindex.Entry, time.Time, gitindex.Format) ([]gitindex.TreeEntry, error) {
	return nil, errors.New("gatecache: the index's stat data is not compared on this platform")
}

// openNoFollow opens the file at p for reading.
func openNoFollow(p string) (*os.File, error) { return os.Open(p) }
