// Package credentials generates a fleet's credentials set (`coordinator
// creds init DIR`): one NATS nkey user per role (natsauth.Roles), each
// seed in a file of its own only its owner may read, and the nats-server
// authorization include that gives each user its role's permissions.
package credentials

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"

	"github.com/supervisorhq/supervisor/shared/natsauth"
)

// ErrExists is returned by Generate when dir already holds a set and force
// is not given.
var ErrExists = errors.New("a credentials set is already there")

// File is one file Generate wrote.
type File struct {
	Path string
	// Role is the role whose seed it holds ("" for the server's
	// configuration).
	Role natsauth.Role
	Mode fs.FileMode
}

// Files lists the paths of a set in dir, the nats-server configuration
// first.
func Files(dir string) []string {
	out := []string{filepath.Join(dir, natsauth.ConfigFile)}
	for _, r := range natsauth.Roles() {
		out = append(out, natsauth.KeyFile(dir, r))
	}
	return out
}

// Generate writes a new credentials set into dir, created with mode 0700
// if missing: a fresh nkey user per role, in <role>.nk (mode 0600), and
// natsauth.ConfigFile naming their public keys. It refuses to replace an
// existing set unless force is set: replacing one locks out every program
// still holding the old files. Each file is written whole (a temporary
// file renamed), so a reader never sees half of one.
func Generate(dir string, force bool) ([]File, error) {
	if !force {
		for _, p := range Files(dir) {
			if _, err := os.Lstat(p); err == nil {
				return nil, fmt.Errorf("%w: %s exists (--force replaces the whole set; every program and "+
					"nats-server then need the new files)", ErrExists, p)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials directory: %w", err)
	}
	users := natsauth.Users{}
	seeds := map[natsauth.Role][]byte{}
	for _, r := range natsauth.Roles() {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, fmt.Errorf("generate the %s role's nkey: %w", r, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("generate the %s role's nkey: %w", r, err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, fmt.Errorf("generate the %s role's nkey: %w", r, err)
		}
		users[r], seeds[r] = pub, seed
	}
	conf, err := natsauth.Config(users)
	if err != nil {
		return nil, err
	}
	var written []File
	for _, r := range natsauth.Roles() {
		f := File{Path: natsauth.KeyFile(dir, r), Role: r, Mode: 0o600}
		content := natsauth.KeyFileContent(r, seeds[r])
		err := writeFile(f.Path, content, f.Mode)
		for i := range content {
			content[i] = 'x'
		}
		if err != nil {
			return written, err
		}
		written = append(written, f)
	}
	// The server's configuration holds public keys only: nats-server,
	// which may run as another user, reads it.
	f := File{Path: filepath.Join(dir, natsauth.ConfigFile), Mode: 0o644}
	if err := writeFile(f.Path, []byte(conf), f.Mode); err != nil {
		return written, err
	}
	return append([]File{f}, written...), nil
}

// writeFile writes data to path with mode through a temporary file in the
// same directory, renamed over path.
func writeFile(path string, data []byte, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
