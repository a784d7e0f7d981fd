package jobrun

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"testing"
)

func TestDiskFull(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"ENOSPC in the chain", fmt.Errorf("prepare workspace: %w", &fs.PathError{Op: "write", Path: "/d/x", Err: syscall.ENOSPC}), true},
		{"EDQUOT", &os.SyscallError{Syscall: "write", Err: syscall.EDQUOT}, true},
		{"git's message", errors.New("git worktree add: exit status 128: fatal: write error: No space left on device"), true},
		{"other I/O error", &fs.PathError{Op: "open", Path: "/d/x", Err: syscall.EACCES}, false},
		{"a bundle missing", errors.New("bundle missing"), false},
	} {
		if got := DiskFull(c.err); got != c.want {
			t.Errorf("%s: DiskFull(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// A job that fails because the runner's disk is full is handed back and
// counts against no breaker, even one its outcome blames (CHAOS-05): the
// repository did nothing wrong.
func TestDiskFullIsTheRunnersFailure(t *testing.T) {
	t.Parallel()
	e := newBreakerEnv(t)
	m := e.meta()
	e.run(t, context.Background(), nil, 1, m, "nak(1s)", func(ctx context.Context, token uint64) Outcome {
		return Outcome{Err: fmt.Errorf("prepare workspace: %w", &fs.PathError{Op: "write", Path: "/data/x", Err: syscall.ENOSPC}),
			Repo: Broke, Work: Broke}
	})
	e.expectStarted(m, 1)
	if b := e.breaker(e.repo); !b.Idle() {
		t.Errorf("repository breaker %+v after a disk-full failure, want untouched", b)
	}
	if b := e.breaker(e.work); !b.Idle() {
		t.Errorf("the work's breaker %+v after a disk-full failure, want untouched", b)
	}
}
