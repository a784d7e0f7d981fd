// Package jobruntest is for tests only: it gives the tests of the job
// runners (the worker's and the gate runner's) the fixture they share: a
// logger writing to the test's log, a context bounded by the test, git with
// a fixed identity, file writing, and a Fleet (an embedded NATS server with
// the fleet's resources, a state store, a sample repository uploaded as a
// bundle, and the reports runners send).
package jobruntest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/testserver"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// testLog sends log lines to t.Log until the test's cleanup ends it.
type testLog struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// Logger returns a text logger at level Info that writes each line to
// t.Log until the test's cleanup, and discards lines logged after it (by
// goroutines that outlive the test).
func Logger(t testing.TB) *slog.Logger {
	w := &testLog{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Context returns a context that times out after 60 seconds and is
// cancelled when the test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Git runs git in dir with a fixed identity, commit signing off and no
// system or global configuration, and returns its combined output as is
// (untrimmed: a diff must keep its last newline). It fails the test if git
// fails.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return string(out)
}

// WriteFile writes data to path, creating its parent directories, and
// fails the test if it cannot.
func WriteFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Fleet is one embedded NATS server with the fleet's resources, a state
// store, a repository uploaded as a bundle the way the CLI does, and the
// reports runners send, as the coordinator's side of the results stream
// receives them.
type Fleet struct {
	// URL is the NATS server's, for runners to connect with their own bus.
	URL string
	// Config is the bus configuration the fleet's bus was opened with.
	Config bus.Config
	// Bus is the fleet's own connection (the coordinator's, in effect).
	Bus *bus.Bus
	// Store is the state store on Bus.
	Store *kvstate.Store
	// Log is the test's logger (see Logger).
	Log *slog.Logger
	// RepoDir is the repository's working tree, at its one commit.
	RepoDir string
	// Repo refers to the repository's uploaded bundle and its commit.
	Repo protocol.RepoRef
	// Reports receives every valid report on the results stream, in order
	// (buffered: 100).
	Reports chan *protocol.Report

	t testing.TB
}

// NewFleet starts an embedded NATS server for the test, opens a bus on it
// named name with cfg, a state store on that bus, commits files (paths
// relative to the repository, and their contents) as the one commit of a
// new repository on branch main, uploads the repository as a bundle, and
// consumes the results stream into Reports. Everything stops when the test
// ends; it fails the test if any step fails.
func NewFleet(t testing.TB, name string, cfg bus.Config, files map[string]string) *Fleet {
	t.Helper()
	f := &Fleet{t: t, Config: cfg, Log: Logger(t), Reports: make(chan *protocol.Report, 100)}
	ctx := Context(t)
	f.URL = testserver.NATS(t)
	b, err := bus.Open(ctx, f.URL, name, cfg, f.Log)
	if err != nil {
		t.Fatalf("bus: %v", err)
	}
	t.Cleanup(b.Close)
	f.Bus = b
	if f.Store, err = kvstate.New(ctx, b.JS); err != nil {
		t.Fatalf("kvstate: %v", err)
	}

	// The user's repository, uploaded the way the CLI does.
	dir := filepath.Join(t.TempDir(), "repo")
	Git(t, "", "init", "--quiet", "--initial-branch=main", dir)
	for path, data := range files {
		WriteFile(t, filepath.Join(dir, path), data)
	}
	Git(t, dir, "add", "--all")
	Git(t, dir, "commit", "--quiet", "-m", "init")
	commit, err := workspace.ResolveCommit(ctx, dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	id, err := workspace.RepoID(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "repo.bundle")
	if err := workspace.CreateBundle(ctx, dir, commit, bundle); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	object := id + "/" + commit + ".bundle"
	if _, err := b.Bundles.PutBytes(ctx, object, data); err != nil {
		t.Fatalf("upload bundle: %v", err)
	}
	f.RepoDir = dir
	f.Repo = protocol.RepoRef{ID: id, BaseCommit: commit, Bundle: object}

	// The coordinator's side of the results stream.
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, protocol.StreamResults, jetstream.ConsumerConfig{
		Durable: "test-results", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: protocol.SubjectResults,
	})
	if err != nil {
		t.Fatalf("results consumer: %v", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var r protocol.Report
		if err := protocol.Decode(m.Data(), &r); err != nil {
			f.Log.Error("undecodable report", "err", err)
		} else if err := r.Validate(); err != nil {
			f.Log.Error("invalid report", "err", err)
		} else {
			f.Reports <- &r
		}
		_ = m.Ack()
	})
	if err != nil {
		t.Fatalf("consume results: %v", err)
	}
	t.Cleanup(cc.Stop)
	return f
}

// Next returns the next report, failing the test if none arrives within
// the duration given.
func (f *Fleet) Next(within time.Duration) *protocol.Report {
	f.t.Helper()
	select {
	case r := <-f.Reports:
		return r
	case <-time.After(within):
		f.t.Fatalf("no report within %s", within)
		return nil
	}
}

// NoReports fails the test if a report arrives within d.
func (f *Fleet) NoReports(d time.Duration) {
	f.t.Helper()
	select {
	case r := <-f.Reports:
		f.t.Fatalf("unexpected %s report: started=%+v agent=%+v gate=%+v", r.Type, r.Started, r.Agent, r.Gate)
	case <-time.After(d):
	}
}

// Settled waits until the jobs consumer of kind in the default pool has
// nothing pending or unacked and returns its info. The consumer may not
// exist yet (a runner creates it when it starts pulling); Settled fails the
// test if it is not settled within 15 seconds.
func (f *Fleet) Settled(kind protocol.JobKind) *jetstream.ConsumerInfo {
	f.t.Helper()
	ctx := Context(f.t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		cons, err := f.Bus.JS.Consumer(ctx, protocol.StreamJobs, protocol.ConsumerName(kind, protocol.DefaultPool))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			f.t.Fatalf("%s jobs consumer: %v", kind, err)
		}
		if err == nil {
			info, err := cons.Info(ctx)
			if err != nil {
				f.t.Fatalf("%s jobs consumer info: %v", kind, err)
			}
			if info.NumAckPending == 0 && info.NumPending == 0 {
				return info
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("%s jobs not settled: %d pending, %d unacked, %d redelivered",
					kind, info.NumPending, info.NumAckPending, info.NumRedelivered)
			}
		} else if time.Now().After(deadline) {
			f.t.Fatalf("%s jobs consumer never created", kind)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
