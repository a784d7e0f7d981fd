package natsauth_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/supervisorhq/supervisor/shared/embedded"
	"github.com/supervisorhq/supervisor/shared/natsauth"
)

// newSet makes a user per role; it returns their public keys and seeds.
func newSet(t *testing.T) (natsauth.Users, map[natsauth.Role][]byte) {
	t.Helper()
	users, seeds := natsauth.Users{}, map[natsauth.Role][]byte{}
	for _, r := range natsauth.Roles() {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		users[r], seeds[r] = pub, seed
	}
	return users, seeds
}

// writeKeys writes each role's key file into a directory.
func writeKeys(t *testing.T, seeds map[natsauth.Role][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for r, s := range seeds {
		if err := os.WriteFile(natsauth.KeyFile(dir, r), natsauth.KeyFileContent(r, s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestConfigParsesToTheEmbeddedUsers: the include file nats-server reads
// gives every user exactly the permissions the embedded server gives it
// (AUTH-01: one table, two renderings).
func TestConfigParsesToTheEmbeddedUsers(t *testing.T) {
	users, _ := newSet(t)
	conf, err := natsauth.Config(users)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, natsauth.ConfigFile), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(main, []byte("listen: 127.0.0.1:-1\ninclude \""+natsauth.ConfigFile+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(main)
	if err != nil {
		t.Fatalf("nats-server cannot read the rendered config: %v\n%s", err, conf)
	}
	want, err := embedded.NkeyUsers(users)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Nkeys) != len(want) {
		t.Fatalf("config has %d nkey users, want %d", len(opts.Nkeys), len(want))
	}
	byKey := map[string]*server.NkeyUser{}
	for _, u := range opts.Nkeys {
		byKey[u.Nkey] = u
	}
	for _, w := range want {
		got := byKey[w.Nkey]
		if got == nil {
			t.Fatalf("config lacks user %s", w.Nkey)
		}
		for name, pair := range map[string][2][]string{
			"publish":   {got.Permissions.Publish.Allow, w.Permissions.Publish.Allow},
			"subscribe": {got.Permissions.Subscribe.Allow, w.Permissions.Subscribe.Allow},
		} {
			g, x := append([]string(nil), pair[0]...), append([]string(nil), pair[1]...)
			sort.Strings(g)
			sort.Strings(x)
			if !reflect.DeepEqual(g, x) {
				t.Errorf("user %s %s: config %v, embedded %v", w.Nkey, name, g, x)
			}
		}
		if (got.Permissions.Response != nil) != (w.Permissions.Response != nil) {
			t.Errorf("user %s: allow_responses differs: config %v, embedded %v", w.Nkey, got.Permissions.Response, w.Permissions.Response)
		}
	}
}

// TestDocsTable: docs/security.md shows the table the code enforces.
func TestDocsTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), natsauth.MarkdownTable()) {
		t.Fatalf("docs/security.md does not contain the permissions table of shared/natsauth; put this in it:\n%s", natsauth.MarkdownTable())
	}
}

// op is one thing a client tries.
type op struct {
	sub     bool // subscribe rather than publish
	subject string
	allowed bool
}

func pub(subject string, allowed bool) op { return op{subject: subject, allowed: allowed} }
func sub(subject string, allowed bool) op { return op{sub: true, subject: subject, allowed: allowed} }

// TestRolePermissions connects to a real server as each role and checks
// that what the role needs is allowed and what it must not do is denied
// (AUTH-02).
func TestRolePermissions(t *testing.T) {
	users, seeds := newSet(t)
	dir := writeKeys(t, seeds)
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(t.TempDir(), "js"), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)

	inbox := func(r natsauth.Role) string { return natsauth.InboxPrefix(users[r]) + ".x" }
	common := func(self natsauth.Role) []op {
		ops := []op{sub(inbox(self), true), sub("_INBOX.x", false), sub(">", false),
			pub("$JS.API.STREAM.DELETE.SUP_EVENTS", self == natsauth.Coordinator),
			pub("$JS.API.STREAM.PURGE.SUP_EVENTS", self == natsauth.Coordinator),
			pub("$JS.API.STREAM.CREATE.SUP_JOBS", self == natsauth.Coordinator),
			pub("sup.evt.wf-1", self == natsauth.Coordinator),
			pub("sup.job.agent.default", self == natsauth.Coordinator),
			pub("sup.job.gate.default", self == natsauth.Coordinator),
			pub("sup.ctl.cancel.wf-1", self == natsauth.Coordinator),
			sub("sup.api.submit", self == natsauth.Coordinator),
			pub("$KV.sup-gates.x", self == natsauth.Coordinator),
		}
		for _, other := range natsauth.Roles() {
			if other != self {
				ops = append(ops, sub(inbox(other), false))
			}
		}
		return ops
	}
	cases := map[natsauth.Role][]op{
		natsauth.Coordinator: {
			pub("$JS.API.CONSUMER.CREATE.SUP_RESULTS.coordinator", true), pub("$JS.ACK.SUP_RESULTS.x.1.1.1.1.1", true),
			pub("$O.sup-bundles.C.x", true), pub("$KV.sup-state.x", true), pub("sup.api.status", true),
			sub("$SRV.PING", true), sub("sup.log.wf-1.n", true), pub("sup.res.wf-1", false),
		},
		natsauth.Worker: {
			pub("sup.api.approve", false), pub("sup.api.submit", false), pub("sup.res.wf-1", true), pub("sup.log.wf-1.n", true),
			sub("sup.log.>", false), sub("sup.ctl.cancel.*", true), sub("sup.res.>", false), sub("sup.evt.>", false),
			pub("$JS.API.CONSUMER.CREATE.SUP_JOBS.agent-default.sup.job.agent.default", true),
			pub("$JS.API.CONSUMER.CREATE.SUP_JOBS.gate-default.sup.job.gate.default", false),
			pub("$JS.API.CONSUMER.CREATE.SUP_EVENTS.x", false), pub("$JS.API.CONSUMER.CREATE.SUP_RESULTS.coordinator", false),
			pub("$JS.API.CONSUMER.MSG.NEXT.SUP_JOBS.agent-default", true), pub("$JS.ACK.SUP_JOBS.agent-default.1.1.1.1.1", true),
			pub("$JS.API.CONSUMER.MSG.NEXT.SUP_RESULTS.coordinator", false), pub("$JS.ACK.SUP_RESULTS.coordinator.1.1.1.1.1", false),
			pub("$O.sup-patches.C.x", true), pub("$O.sup-logs.C.x", true), pub("$O.sup-bundles.C.x", false),
			pub("$KV.sup-state.lock.x", true), pub("$KV.sup-runners.agent.h", true),
			pub("$JS.API.STREAM.PURGE.OBJ_sup-patches", false), pub("$JS.API.STREAM.DELETE.OBJ_sup-logs", false),
		},
		natsauth.GateRunner: {
			pub("sup.api.approve", false), pub("sup.res.wf-1", true), pub("sup.log.wf-1.n", false),
			pub("$JS.API.CONSUMER.CREATE.SUP_JOBS.gate-default.sup.job.gate.default", true),
			pub("$JS.API.CONSUMER.CREATE.SUP_JOBS.agent-default.sup.job.agent.default", false),
			pub("$O.sup-logs.C.x", true), pub("$O.sup-patches.C.x", false), pub("$O.sup-bundles.C.x", false),
			pub("$KV.sup-state.lock.x", true), sub("sup.ctl.cancel.*", true),
		},
		natsauth.CLI: {
			pub("sup.api.submit", true), pub("sup.api.status", true), pub("sup.api.logs", true), pub("sup.api.cancel", true),
			pub("sup.api.fleet", true), pub("sup.api.inbox", true),
			pub("sup.api.approve", false), pub("sup.api.reject", false), pub("sup.api.retry", false), pub("sup.api.merge", false),
			pub("sup.api.breaker-reset", false), pub("sup.api.gate-add", false), pub("sup.api.gate-remove", false),
			pub("sup.api.gate-rerun", false), pub("sup.api.resume", false),
			pub("sup.res.wf-1", false), pub("sup.log.wf-1.n", false), sub("sup.log.wf-1.n", true), sub("sup.ctl.cancel.*", false),
			pub("$O.sup-bundles.C.x", true), pub("$O.sup-logs.C.x", false), pub("$KV.sup-state.lock.x", false),
			pub("$JS.API.DIRECT.GET.OBJ_sup-patches.$O.sup-patches.M.x", false), pub("$JS.API.DIRECT.GET.OBJ_sup-logs.$O.sup-logs.M.x", true),
			pub("$KV.sup-runners.agent.h", false),
			pub("$JS.API.CONSUMER.CREATE.SUP_EVENTS.x.sup.evt.wf-1", true), pub("$JS.API.CONSUMER.MSG.NEXT.SUP_JOBS.agent-default", false),
		},
		natsauth.Operator: {
			pub("sup.api.submit", true), pub("sup.api.approve", true), pub("sup.api.reject", true), pub("sup.api.retry", true),
			pub("sup.api.merge", true), pub("sup.api.breaker-reset", true), pub("sup.api.gate-add", true),
			pub("sup.api.gate-update", true), pub("sup.api.gate-remove", true), pub("sup.api.gate-rerun", true),
			pub("sup.api.resume", true), pub("sup.res.wf-1", false), pub("$KV.sup-state.lock.x", false),
		},
	}
	for _, role := range natsauth.Roles() {
		for _, o := range append(cases[role], common(role)...) {
			verb := "publish to"
			if o.sub {
				verb = "subscribe to"
			}
			t.Run(string(role)+" "+verb+" "+o.subject, func(t *testing.T) {
				key := natsauth.KeyFile(dir, role)
				auth, err := nats.NkeyOptionFromSeed(key)
				if err != nil {
					t.Fatal(err)
				}
				nc, err := nats.Connect(srv.URL(), auth, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				if o.sub {
					_, err = nc.SubscribeSync(o.subject)
				} else {
					err = nc.Publish(o.subject, []byte("x"))
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := nc.Flush(); err != nil {
					t.Fatal(err)
				}
				denied := errors.Is(nc.LastError(), nats.ErrPermissionViolation)
				if denied == o.allowed {
					t.Fatalf("%s may %s %s: got allowed=%v (last error %v), want %v", role, verb, o.subject, !denied, nc.LastError(), o.allowed)
				}
			})
		}
	}
}

// TestAnonymousRefused: a server with users refuses clients without
// credentials and with a key it does not know (AUTH-03).
func TestAnonymousRefused(t *testing.T) {
	users, _ := newSet(t)
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(t.TempDir(), "js"), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	if nc, err := nats.Connect(srv.URL()); err == nil {
		nc.Close()
		t.Fatal("an anonymous client was let in")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("anonymous: got %v, want an authorization violation", err)
	}
	_, strangers := newSet(t)
	dir := writeKeys(t, strangers)
	auth, err := nats.NkeyOptionFromSeed(natsauth.KeyFile(dir, natsauth.Operator))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(srv.URL(), auth); err == nil {
		nc.Close()
		t.Fatal("a client with an unknown nkey was let in")
	}
}

// TestReadKeyFile reads the role and public key, and names the file of a
// bad one without showing its content.
func TestReadKeyFile(t *testing.T) {
	users, seeds := newSet(t)
	dir := writeKeys(t, seeds)
	k, err := natsauth.ReadKeyFile(natsauth.KeyFile(dir, natsauth.Worker))
	if err != nil {
		t.Fatal(err)
	}
	if k.Role != natsauth.Worker || k.Public != users[natsauth.Worker] {
		t.Fatalf("got %+v, want role worker and key %s", k, users[natsauth.Worker])
	}
	got, err := natsauth.LoadUsers(dir)
	if err != nil || !reflect.DeepEqual(got, users) {
		t.Fatalf("LoadUsers = %v, %v; want %v", got, err, users)
	}
	bad := filepath.Join(dir, "bad.nk")
	if err := os.WriteFile(bad, []byte("not-a-seed-secretvalue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = natsauth.ReadKeyFile(bad)
	if err == nil || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), "secretvalue") {
		t.Fatalf("bad key file: got %v, want an error naming %s without its content", err, bad)
	}
	if _, err := natsauth.LoadUsers(t.TempDir()); err == nil || !strings.Contains(err.Error(), "creds init") {
		t.Fatalf("empty set: got %v, want an error saying how to make one", err)
	}
}
