package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockFile takes an exclusive flock on path (created if missing), waiting
// until it is free or ctx is done. Closing the returned file releases the
// lock; so does the death of the process, which is what makes the lock safe
// across processes that crash. The descriptor is close-on-exec, so child
// processes (git, agents) never inherit the lock.
func lockFile(ctx context.Context, path string) (*os.File, error) {
	delay := 2 * time.Millisecond
	for {
		f, ok, err := tryLockFile(path)
		if err != nil {
			return nil, err
		}
		if ok {
			return f, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// tryLockFile takes an exclusive flock on path (created if missing) without
// waiting. ok is false when another open file description holds it.
func tryLockFile(path string) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("open lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return f, true, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		f.Close()
		return nil, false, nil
	default:
		f.Close()
		return nil, false, fmt.Errorf("flock %s: %w", path, err)
	}
}
