package bus

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/supervisorhq/supervisor/shared/embedded"
	"github.com/supervisorhq/supervisor/shared/natsauth"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// keySet writes a key file per role into a new directory and returns it
// with the users' public keys.
func keySet(t *testing.T) (string, natsauth.Users) {
	t.Helper()
	dir, users := t.TempDir(), natsauth.Users{}
	for _, r := range natsauth.Roles() {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		users[r], _ = kp.PublicKey()
		seed, _ := kp.Seed()
		if err := os.WriteFile(natsauth.KeyFile(dir, r), natsauth.KeyFileContent(r, seed), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, users
}

func authServer(t *testing.T, users natsauth.Users) *embedded.Server {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(t.TempDir(), "js"), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// TestConnectRefusedNamesWhatIsWrong: NATS refusing a client's
// credentials ends Connect at once (no retrying forever), with a message
// naming the role, the file and the server, and what to do (AUTH-04).
func TestConnectRefusedNamesWhatIsWrong(t *testing.T) {
	dir, users := keySet(t)
	other, _ := keySet(t)
	srv := authServer(t, users)
	cases := []struct {
		name string
		opt  ConnectOption
		want error
		says []string
	}{
		{"no credentials", WithNkey("", natsauth.Worker), ErrRefused, []string{"requires credentials", "--nats-nkey", srv.URL()}},
		{"another set's key", WithNkey(natsauth.KeyFile(other, natsauth.Worker), natsauth.Worker), ErrRefused,
			[]string{"refused the worker role", natsauth.KeyFile(other, natsauth.Worker), srv.URL()}},
		{"another role's key", WithNkey(natsauth.KeyFile(dir, natsauth.CLI), natsauth.Worker), ErrBadNkey,
			[]string{"holds the cli role's key", "needs the worker role's"}},
		{"no key file", WithNkey(filepath.Join(dir, "missing.nk"), natsauth.Worker), ErrBadNkey, []string{"missing.nk"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A minute would be spent retrying if the refusal were retried.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			nc, err := Connect(ctx, srv.URL(), "test", quiet, c.opt)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("Connect retried until its context ended (%s)", time.Since(start))
			}
		})
	}
}

// TestRunnerWaitsForTheCoordinator: a worker with credentials creates
// nothing; it waits until the coordinator has created the streams and
// buckets, then binds them (AUTH-05).
func TestRunnerWaitsForTheCoordinator(t *testing.T) {
	dir, users := keySet(t)
	srv := authServer(t, users)
	ctx := testkit.Context(t, 60*time.Second)
	got := make(chan error, 1)
	go func() {
		b, err := Open(ctx, srv.URL(), "worker", Config{}, quiet, WithNkey(natsauth.KeyFile(dir, natsauth.Worker), natsauth.Worker))
		if err == nil {
			defer b.Close()
			_, err = b.JobConsumer(ctx, protocol.KindAgent, "default")
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the worker did not wait for the coordinator: %v", err)
	case <-time.After(time.Second):
	}
	c, err := Open(ctx, srv.URL(), "coordinator", Config{}, quiet, WithNkey(natsauth.KeyFile(dir, natsauth.Coordinator), natsauth.Coordinator))
	if err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	defer c.Close()
	if err := <-got; err != nil {
		t.Fatalf("worker: %v", err)
	}
}

// TestRunnerLackingAPermissionFailsAtStart: a worker whose role lacks
// creating its consumer fails with ErrDenied naming the subject and the
// role, rather than retrying (AUTH-04).
func TestRunnerLackingAPermissionFailsAtStart(t *testing.T) {
	dir, users := keySet(t)
	nk, err := embedded.NkeyUsers(users)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range nk {
		if u.Nkey != users[natsauth.Worker] {
			continue
		}
		var keep []string
		for _, s := range u.Permissions.Publish.Allow {
			if !strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE.SUP_JOBS.") {
				keep = append(keep, s)
			}
		}
		u.Permissions.Publish.Allow = keep
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true, Nkeys: nk})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(srv.Shutdown)
	ctx := testkit.Context(t, 90*time.Second)
	c, err := Open(ctx, srv.ClientURL(), "coordinator", Config{}, quiet, WithNkey(natsauth.KeyFile(dir, natsauth.Coordinator), natsauth.Coordinator))
	if err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	defer c.Close()
	w, err := Open(ctx, srv.ClientURL(), "worker", Config{}, quiet, WithNkey(natsauth.KeyFile(dir, natsauth.Worker), natsauth.Worker))
	if err != nil {
		t.Fatalf("worker: %v", err)
	}
	defer w.Close()
	_, err = w.JobConsumer(ctx, protocol.KindAgent, "default")
	if !errors.Is(err, ErrDenied) {
		t.Fatalf("got %v, want ErrDenied", err)
	}
	for _, s := range []string{"$JS.API.CONSUMER.CREATE.SUP_JOBS.agent-default", "the worker role lacks it"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the denied consumer was retried until the context ended")
	}
}

// TestInProcessKeepsCredentialsAndPermissions: a client connected to an
// embedded server through the in-memory pipe (InProcess) uses no socket,
// and the server still authenticates it and applies its role's
// permissions (AUTH-04).
func TestInProcessKeepsCredentialsAndPermissions(t *testing.T) {
	dir, users := keySet(t)
	srv := authServer(t, users)
	ctx := testkit.Context(t, 60*time.Second)
	if _, err := Connect(ctx, srv.URL(), "test", quiet, InProcess(srv), WithNkey("", natsauth.Worker)); !errors.Is(err, ErrRefused) {
		t.Fatalf("in-process without credentials: %v, want ErrRefused", err)
	}
	c, err := Open(ctx, srv.URL(), "coordinator", Config{}, quiet, InProcess(srv),
		WithNkey(natsauth.KeyFile(dir, natsauth.Coordinator), natsauth.Coordinator))
	if err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	defer c.Close()
	if addr := c.NC.ConnectedAddr(); addr != "pipe" {
		t.Fatalf("the in-process client is connected to %q, want the in-memory pipe", addr)
	}
	w, err := Connect(ctx, srv.URL(), "worker", quiet, InProcess(srv), WithNkey(natsauth.KeyFile(dir, natsauth.Worker), natsauth.Worker))
	if err != nil {
		t.Fatalf("worker: %v", err)
	}
	defer w.Close()
	// A worker may not write the event log.
	if err := w.Publish(protocol.EventSubject("wf-x"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_ = w.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for Denied(w) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := Denied(w); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "sup.evt.wf-x") {
		t.Fatalf("a worker's event publish in process: %v, want ErrDenied naming the subject", err)
	}
}
