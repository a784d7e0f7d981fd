package redisstate_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervisorhq/supervisor/shared/gatecache"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// aclServer is a real redis-server serving TLS only, with an ACL user per
// role (redisstate.ACLFile) whose password is in a file of its own.
type aclServer struct {
	addr      string
	certs     string
	passwords map[string]string // role: password file
}

func startACLServer(t *testing.T) aclServer {
	t.Helper()
	certs := testkit.Certs(t)
	dir := t.TempDir()
	s := aclServer{certs: certs, passwords: map[string]string{}}
	var users []redisstate.ACLUser
	for _, role := range redisstate.ACLRoles {
		pw, err := redisstate.NewPassword()
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, redisstate.ACLUser{Name: role, Role: role, Password: pw})
		s.passwords[role] = filepath.Join(dir, role+".password")
		testkit.WriteFile(t, s.passwords[role], pw+"\n")
	}
	acl, err := redisstate.ACLFile(users, redisstate.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	aclPath := filepath.Join(dir, "users.acl")
	testkit.WriteFile(t, aclPath, acl)
	s.addr = testkit.RedisTLS(t, certs, aclPath)
	return s
}

func (s aclServer) url(role string) string { return "rediss://" + role + "@" + s.addr + "/0" }

// open opens a store as role over TLS with the role's certificate.
func (s aclServer) open(t *testing.T, role string) *redisstate.Store {
	t.Helper()
	st, err := redisstate.Open(context.Background(), s.url(role),
		redisstate.WithTLS(testkit.CertFiles(s.certs, role)), redisstate.WithPasswordFile(s.passwords[role]))
	if err != nil {
		t.Fatalf("open as %s: %v", role, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// raw is a plain go-redis client logged in as role, for commands the
// store never sends.
func (s aclServer) raw(t *testing.T, role string) *redis.Client {
	t.Helper()
	opts, err := redisstate.ClientOptions(s.url(role),
		redisstate.WithTLS(testkit.CertFiles(s.certs, role)), redisstate.WithPasswordFile(s.passwords[role]))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestACLRoles (ACL-01, ACL-02, TLS-04) runs, as each role's
// ACL user over TLS, the store operations that role performs, and checks
// that what it must not do is refused with NOPERM.
func TestACLRoles(t *testing.T) {
	t.Parallel()
	srv := startACLServer(t)
	ctx := testkit.Context(t, time.Minute)
	type op struct {
		what string
		run  func(context.Context, *redisstate.Store) error
	}
	acquire := func(key string) func(context.Context, *redisstate.Store) error {
		return func(ctx context.Context, s *redisstate.Store) error {
			l, err := s.Acquire(ctx, key, "test", time.Minute)
			if err != nil {
				return err
			}
			if _, err := s.Renew(ctx, l, time.Minute); err != nil {
				return err
			}
			return s.Release(ctx, l)
		}
	}
	put := func(key string) func(context.Context, *redisstate.Store) error {
		return func(ctx context.Context, s *redisstate.Store) error {
			if err := s.CachePut(ctx, key, []byte("v"), time.Minute); err != nil {
				return err
			}
			if _, err := s.CacheGet(ctx, key); err != nil {
				return err
			}
			return s.CacheDelete(ctx, key)
		}
	}
	get := func(key string) func(context.Context, *redisstate.Store) error {
		return func(ctx context.Context, s *redisstate.Store) error {
			_, err := s.CacheGet(ctx, key)
			if errors.Is(err, state.ErrNotFound) {
				return nil
			}
			return err
		}
	}
	breakers := func(ctx context.Context, s *redisstate.Store) error {
		p := state.DefaultBreakerPolicy()
		if _, err := s.BreakerAllow(ctx, "gate:test", p); err != nil {
			return err
		}
		if _, err := s.BreakerReport(ctx, "gate:test", p, false); err != nil {
			return err
		}
		_, err := s.BreakerGet(ctx, "gate:test")
		return err
	}
	breakerAdmin := func(ctx context.Context, s *redisstate.Store) error {
		if _, err := s.BreakerList(ctx); err != nil {
			return err
		}
		_, err := s.BreakerReset(ctx, "gate:test")
		return err
	}
	finished := protocol.WorkflowFinishedKey("wf-1")
	for _, tc := range []struct {
		role    string
		allowed []op
		refused []op
	}{
		{redisstate.RoleCoordinator,
			[]op{{"leader lease", acquire("coordinator/leader")}, {"merge lock", acquire("merge/repo/main")},
				{"watchdog's job lease", acquire("lease/job-1")}, {"finished marker", put(finished)},
				{"breakers", breakers}, {"breaker list and reset", breakerAdmin}},
			[]op{{"file lock", acquire(protocol.FileLockKey("wf", "n"))}, {"gate cache entry", put(gatecache.EntryPrefix + "k")}}},
		{redisstate.RoleWorker,
			[]op{{"job lease", acquire("lease/job-2")}, {"file lock", acquire(protocol.FileLockKey("wf", "n"))},
				{"read finished marker", get(finished)}, {"breakers", breakers}},
			[]op{{"leader lease", acquire("coordinator/leader")}, {"write finished marker", put(finished)},
				{"gate cache entry", put(gatecache.EntryPrefix + "k")}, {"breaker list", breakerAdmin}}},
		{redisstate.RoleGateRunner,
			[]op{{"job lease", acquire("lease/job-3")}, {"gate cache lock", acquire(gatecache.LockPrefix + "k")},
				{"gate cache entry", put(gatecache.EntryPrefix + "k")}, {"read finished marker", get(finished)}, {"breakers", breakers}},
			[]op{{"leader lease", acquire("coordinator/leader")}, {"file lock", acquire(protocol.FileLockKey("wf", "n"))},
				{"write finished marker", put(finished)}, {"breaker list", breakerAdmin}}},
	} {
		t.Run(tc.role, func(t *testing.T) {
			s := srv.open(t, tc.role)
			for _, o := range tc.allowed {
				if err := o.run(ctx, s); err != nil {
					t.Errorf("%s as %s: %v", o.what, tc.role, err)
				}
			}
			for _, o := range tc.refused {
				if err := o.run(ctx, s); err == nil || !strings.Contains(err.Error(), "NOPERM") {
					t.Errorf("%s as %s: err %v, want NOPERM", o.what, tc.role, err)
				}
			}
			c := srv.raw(t, tc.role)
			for _, cmd := range [][]any{{"FLUSHDB"}, {"FLUSHALL"}, {"KEYS", "*"}, {"CONFIG", "GET", "*"}, {"ACL", "LIST"},
				{"SET", "elsewhere", "x"}, {"CLIENT", "LIST"}, {"INFO"}, {"SCRIPT", "FLUSH"}, {"SHUTDOWN"}} {
				if err := c.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
					t.Errorf("%v as %s: err %v, want NOPERM", cmd, tc.role, err)
				}
			}
		})
	}
}

// TestACLRefusals (ACL-03, TLS-04): a wrong password, another
// role's password, a missing password file and a client that does not
// trust the server's CA are refused at once with errors that say what
// was refused and name the URL without its password.
func TestACLRefusals(t *testing.T) {
	t.Parallel()
	srv := startACLServer(t)
	worker := testkit.CertFiles(srv.certs, "worker")
	other := testkit.CertFiles(testkit.Certs(t), "worker")
	missing := filepath.Join(t.TempDir(), "missing.password")
	wrong := filepath.Join(t.TempDir(), "wrong.password")
	testkit.WriteFile(t, wrong, "not-it\n")
	for _, tc := range []struct {
		name string
		url  string
		opts []redisstate.Option
		want []string
	}{
		{"wrong password in the URL", "rediss://worker:hunter2@" + srv.addr + "/0", []redisstate.Option{redisstate.WithTLS(worker)},
			[]string{`refused user "worker"`, "rediss://worker:xxxxx@" + srv.addr}},
		{"another role's password", srv.url("worker"), []redisstate.Option{redisstate.WithTLS(worker), redisstate.WithPasswordFile(srv.passwords["gaterunner"])},
			[]string{`refused user "worker"`}},
		{"wrong password file", srv.url("worker"), []redisstate.Option{redisstate.WithTLS(worker), redisstate.WithPasswordFile(wrong)},
			[]string{`refused user "worker"`}},
		{"missing password file", srv.url("worker"), []redisstate.Option{redisstate.WithTLS(worker), redisstate.WithPasswordFile(missing)},
			[]string{"password file " + missing + " unreadable"}},
		{"password in URL and file", "rediss://worker:hunter2@" + srv.addr + "/0", []redisstate.Option{redisstate.WithTLS(worker), redisstate.WithPasswordFile(wrong)},
			[]string{"password file " + wrong + " is given too"}},
		{"CA of another fleet", srv.url("worker"), []redisstate.Option{redisstate.WithTLS(tlsconfig.Files{CA: other.CA, Cert: worker.Cert, Key: worker.Key}), redisstate.WithPasswordFile(srv.passwords["worker"])},
			[]string{"certificate not trusted", "not signed by CA " + other.CA}},
		{"no client certificate", srv.url("worker"), []redisstate.Option{redisstate.WithTLS(tlsconfig.Files{CA: worker.CA}), redisstate.WithPasswordFile(srv.passwords["worker"])},
			[]string{"refused the TLS handshake"}},
		{"system roots", srv.url("worker"), []redisstate.Option{redisstate.WithPasswordFile(srv.passwords["worker"])},
			[]string{"certificate not trusted", "system's roots"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := redisstate.Open(testkit.Context(t, 30*time.Second), tc.url, tc.opts...)
			if err == nil {
				_ = st.Close()
				t.Fatal("opened")
			}
			if errors.Is(err, state.ErrUnavailable) {
				t.Errorf("err %v says unreachable", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("err %q leaks the password", err)
			}
		})
	}
}

// TestACLFile: each role's user line carries its rules and a hash of its
// password, never the password; bad users are refused.
func TestACLFile(t *testing.T) {
	acl, err := redisstate.ACLFile([]redisstate.ACLUser{{Name: "w1", Role: "worker", Password: "p4ss"}}, "sup:")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(acl, "p4ss") {
		t.Errorf("ACL file holds the password:\n%s", acl)
	}
	for _, want := range []string{"user default on nopass resetchannels resetkeys -@all +ping", "user w1 on #", "~sup:lock:{lease/*}", "%R~sup:cache:workflow-finished/*"} {
		if !strings.Contains(acl, want) {
			t.Errorf("ACL file lacks %q:\n%s", want, acl)
		}
	}
	for _, users := range [][]redisstate.ACLUser{
		{{Name: "x", Role: "nobody", Password: "p"}},
		{{Name: "x", Role: "worker"}},
		{{Name: "a b", Role: "worker", Password: "p"}},
		{{Name: "default", Role: "worker", Password: "p"}},
	} {
		if _, err := redisstate.ACLFile(users, "sup:"); err == nil {
			t.Errorf("ACLFile(%+v) succeeded", users)
		}
	}
}
