package credentials

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/shared/natsauth"
)

// TestGenerate writes a key per role, secret files 0600 in a 0700
// directory, and the server config naming their public keys; it refuses
// to replace the set unless forced (AUTH-06).
func TestGenerate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	files, err := Generate(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(natsauth.Roles())+1 {
		t.Fatalf("wrote %d files, want %d", len(files), len(natsauth.Roles())+1)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode: %v %v, want 0700", st.Mode(), err)
	}
	users, err := natsauth.LoadUsers(dir)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile(filepath.Join(dir, natsauth.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range natsauth.Roles() {
		key := natsauth.KeyFile(dir, r)
		st, err := os.Stat(key)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v %v, want 0600", key, st.Mode(), err)
		}
		if !strings.Contains(string(conf), users[r]) {
			t.Errorf("the server config lacks the %s role's public key", r)
		}
		// nats.go reads the file as it is.
		if _, err := nats.NkeyOptionFromSeed(key); err != nil {
			t.Errorf("nats.go cannot read %s: %v", key, err)
		}
		data, _ := os.ReadFile(key)
		if strings.Contains(string(conf), strings.TrimSpace(string(data[strings.LastIndex(strings.TrimSpace(string(data)), "\n")+1:]))) {
			t.Errorf("the server config holds the %s role's seed", r)
		}
	}
	if _, err := Generate(dir, false); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second Generate: got %v, want ErrExists naming --force", err)
	}
	if _, err := Generate(dir, true); err != nil {
		t.Fatalf("Generate --force: %v", err)
	}
	again, err := natsauth.LoadUsers(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again[natsauth.Worker] == users[natsauth.Worker] {
		t.Fatal("--force kept the old keys")
	}
}
