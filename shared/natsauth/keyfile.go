package natsauth

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"
)

// roleLine is how a key file names its role, in a comment line.
const roleLine = "# supervisor-role: "

// Key is an nkey user read from a key file.
type Key struct {
	// File is where it was read from.
	File string
	// Role is the role the file says it is for ("" if it does not say).
	Role Role
	// Public is the user's public key.
	Public string
}

// KeyFileContent is the content of a key file for role with seed: a
// comment naming the role, then the seed, as nats.go's seed-file reader
// (and nsc) expect.
func KeyFileContent(role Role, seed []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Supervisor NATS credentials (an nkey seed): keep this file secret, mode 0600.\n%s%s\n%s\n",
		roleLine, role, seed)
	return b.Bytes()
}

// ReadKeyFile reads an nkey user seed file (as `coordinator creds init`
// writes them): its role, if it names one, and its public key. The error
// names the file and what is wrong with it, never the seed.
func ReadKeyFile(path string) (Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("NATS nkey file: %w", err)
	}
	defer wipe(data)
	k := Key{File: path}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if r, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), roleLine); ok {
			k.Role = Role(strings.TrimSpace(r))
		}
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return Key{}, fmt.Errorf("NATS nkey file %s: no valid nkey seed in it: %w", path, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return Key{}, fmt.Errorf("NATS nkey file %s: %w", path, err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return Key{}, fmt.Errorf("NATS nkey file %s: not a user seed (it must start with SU)", path)
	}
	k.Public = pub
	return k, nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// Names of a credentials set's files in its directory.
const (
	// ConfigFile is the nats-server authorization include (Config).
	ConfigFile = "nats-auth.conf"
	// KeyFileExt ends each role's nkey seed file: worker.nk.
	KeyFileExt = ".nk"
)

// KeyFile is where a credentials set in dir keeps role's nkey seed.
func KeyFile(dir string, role Role) string { return filepath.Join(dir, string(role)+KeyFileExt) }

// LoadUsers reads the public keys of every role's key file of the
// credentials set in dir. A file that names another role than its name
// says is refused.
func LoadUsers(dir string) (Users, error) {
	users := Users{}
	for _, r := range Roles() {
		k, err := ReadKeyFile(KeyFile(dir, r))
		if err != nil {
			return nil, fmt.Errorf("credentials set %s: %w (make one with `coordinator creds init %s`)", dir, err, dir)
		}
		if k.Role != "" && k.Role != r {
			return nil, fmt.Errorf("credentials set %s: %s names the %s role", dir, k.File, k.Role)
		}
		users[r] = k.Public
	}
	return users, nil
}
