package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/shared/natsauth"
)

func runMain(args ...string) cliResult {
	var out, errOut bytes.Buffer
	code := Main(args, &out, &errOut)
	return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
}

// TestCredsInit: creds init writes the set and says which file goes
// where; a second run refuses to replace it (AUTH-06).
func TestCredsInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	r := runMain("creds", "init", dir)
	wantCode(t, r, 0, natsauth.ConfigFile, "worker.nk", "operator.nk", "--nats-nkey", "include")
	if _, err := natsauth.LoadUsers(dir); err != nil {
		t.Fatal(err)
	}
	wantCode(t, runMain("creds", "init", dir), ExitUsage)
	if r := runMain("creds", "init", dir); !strings.Contains(r.stderr, "--force") {
		t.Fatalf("refusal does not name --force: %s", r.stderr)
	}
	wantCode(t, runMain("creds", "init", "--force", dir), 0)
}

// TestDevListenNeedsCreds: dev on an address other hosts reach refuses
// to start without credentials, saying how to make them (AUTH-07).
func TestDevListenNeedsCreds(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "192.0.2.1:4222", "[::]:0"} {
		r := runMain("dev", "--listen", listen, "--data-dir", t.TempDir(), "--metrics-listen", "", "--http-listen", "")
		wantCode(t, r, ExitUsage, "creds init", "--creds", listen)
	}
	for _, listen := range []string{"127.0.0.1:4222", "localhost:4222", "[::1]:4222"} {
		if _, err := devCreds(listen, ""); err != nil {
			t.Errorf("--listen %s: %v", listen, err)
		}
	}
	dir := filepath.Join(t.TempDir(), "creds")
	wantCode(t, runMain("creds", "init", dir), 0)
	if got, err := devCreds("0.0.0.0:4222", dir); err != nil || got != dir {
		t.Fatalf("with --creds: %q, %v", got, err)
	}
	if _, err := devCreds("0.0.0.0:4222", t.TempDir()); err == nil || !strings.Contains(err.Error(), "creds init") {
		t.Fatalf("an empty --creds directory: got %v", err)
	}
}

// TestDevWithCreds: the embedded fleet with a credentials set refuses
// anonymous clients, its in-process worker and gate runner start with
// their own roles, the cli role may ask for status but not approve, and
// the operator may (AUTH-03, AUTH-07, AUTH-08).
func TestDevWithCreds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	wantCode(t, runMain("creds", "init", dir), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := fleet.Start(ctx, fleet.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Creds: dir,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("start fleet: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if nc, err := nats.Connect(st.URL()); err == nil {
		nc.Close()
		t.Fatal("an anonymous client was let in")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("anonymous: %v", err)
	}
	url := "--nats=" + st.URL()
	wantCode(t, runMain("status", url), ExitDenied, "requires credentials", "--nats-nkey")
	cli, op := "--nats-nkey="+natsauth.KeyFile(dir, natsauth.CLI), "--nats-nkey="+natsauth.KeyFile(dir, natsauth.Operator)
	wantCode(t, runMain("status", url, cli), 0)
	wantCode(t, runMain("fleet", url, cli), 0, "worker", "gaterunner")
	wantCode(t, runMain("approve", "wf-none", "n", url, cli, "--timeout", "20s"), ExitDenied,
		`"sup.api.approve"`, "the cli role lacks it")
	// The operator may ask; the coordinator answers there is no such workflow.
	r := runMain("approve", "wf-none", "n", url, op, "--timeout", "20s")
	if r.code == ExitDenied || r.code == ExitUnavailable || r.code == 0 {
		t.Fatalf("operator approve: %+v", r)
	}
}
