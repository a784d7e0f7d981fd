package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTLSInit (TLS-05, ACL-01): tls init writes the set and says what each
// part is; it refuses to run with nothing to generate and never writes
// over an existing set (usage errors, exit 64).
func TestTLSInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	var out, errOut bytes.Buffer
	if code := Main([]string{"tls", "init", dir, "--hosts", "nats-1,127.0.0.1", "--redis-acl"}, &out, &errOut); code != 0 {
		t.Fatalf("tls init: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"tls/ca", "tls/nats", "tls/redis", "tls/worker", "redis/users.acl", "redis/worker.password"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("tls init output lacks %s:\n%s", want, out.String())
		}
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			t.Error(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tls", "init", dir, "--hosts", "x"}, "already there"},
		{[]string{"tls", "init", filepath.Join(t.TempDir(), "other")}, "nothing to generate"},
	} {
		out.Reset()
		errOut.Reset()
		if code := Main(tc.args, &out, &errOut); code != ExitUsage || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d saying %q", tc.args, code, errOut.String(), ExitUsage, tc.want)
		}
	}
}
