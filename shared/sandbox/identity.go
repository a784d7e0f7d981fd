package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// processIdentityVersion is mixed into every process environment id; bump
// it when what Process.Run gives a command changes in a way that could
// change a gate's outcome (the base environment, the process handling).
const processIdentityVersion = "supervisor-process-env/v2"

// EnvironmentID identifies the environment spec would run in, for the gate
// cache key, which must change when the tools a gate runs change; without
// an id the gate is not cached (CD-19). It is "process:" followed by the
// SHA-256 of the sandbox's PATH, the user commands run as (RunAs, or the
// runner's own), the program Argv[0] resolves to in that
// PATH (absolute, and with symbolic links resolved) and the SHA-256 of the
// program's content. A rebuilt or upgraded tool, or another PATH, gives
// another id; what the program itself loads (shared libraries, an
// interpreter named by a #! line, a toolchain beside it) is not covered,
// an accepted limit of the cache (CA-06).
//
// A name with a slash that is relative (./check.sh) is resolved against
// spec.Workspace/spec.WorkingDir like Run does; since workspaces are
// disposable directories, the name as written stands for the path, and the
// content is hashed as for any program.
//
// Content hashes of programs outside the workspace are remembered by path,
// size and modification time, so repeated gates do not re-read a large
// toolchain binary. The error wraps ErrInvalidSpec or ErrStart when the
// program cannot be found, like Run's.
func (p *Process) EnvironmentID(ctx context.Context, spec Spec) (string, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return "", fmt.Errorf("%w: empty argv", ErrInvalidSpec)
	}
	name := spec.Argv[0]
	relative := strings.Contains(name, "/") && !filepath.IsAbs(name)
	dir := ""
	if relative {
		var err error
		if dir, err = resolveWorkDir(spec.Workspace, spec.WorkingDir); err != nil {
			return "", err
		}
	}
	prog, err := p.lookPath(name, dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(prog)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrStart, err)
	}
	sum, err := executableHash(ctx, real, !relative)
	if err != nil {
		return "", err
	}

	h := sha256.New()
	field := func(s string) { // length-prefixed, so fields cannot run together
		fmt.Fprintf(h, "%d:%s\n", len(s), s)
	}
	field(processIdentityVersion)
	field(p.path)
	if p.runAs != nil {
		field("user " + p.runAs.String())
	} else {
		field("runner's user")
	}
	if relative {
		field("relative")
		field(name)
	} else {
		field("absolute")
		field(prog)
		field(real)
	}
	field(sum)
	return "process:" + hex.EncodeToString(h.Sum(nil)), nil
}

// exeStamp is what a remembered executable hash is valid for.
type exeStamp struct {
	path  string
	size  int64
	mtime int64 // UnixNano
}

// maxExeHashes bounds the remembered executable hashes; the memo starts
// over when it is full.
const maxExeHashes = 1024

var exeHashes = struct {
	sync.Mutex
	m map[exeStamp]string
}{m: map[exeStamp]string{}}

// executableHash returns the hex SHA-256 of the regular file at path,
// remembered by path, size and mtime when remember is set.
func executableHash(ctx context.Context, path string, remember bool) (string, error) {
	before, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrStart, err)
	}
	if !before.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s: not a regular file", ErrStart, path)
	}
	stamp := exeStamp{path: path, size: before.Size(), mtime: before.ModTime().UnixNano()}
	if remember {
		exeHashes.Lock()
		sum, ok := exeHashes.m[stamp]
		exeHashes.Unlock()
		if ok {
			return sum, nil
		}
	}
	sum, err := hashFile(ctx, path)
	if err != nil {
		return "", err
	}
	// Remember only if the file did not change while it was read.
	if after, err := os.Stat(path); remember && err == nil && after.Size() == stamp.size &&
		after.ModTime().UnixNano() == stamp.mtime && os.SameFile(before, after) {
		exeHashes.Lock()
		if len(exeHashes.m) >= maxExeHashes {
			clear(exeHashes.m)
		}
		exeHashes.m[stamp] = sum
		exeHashes.Unlock()
	}
	return sum, nil
}

// hashFile hashes path's content, stopping early when ctx ends.
func hashFile(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrStart, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, &ctxReader{ctx: ctx, r: f}); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("sandbox: hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
