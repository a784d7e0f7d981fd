// Package jobruntest is for tests only: it gives the tests of the job
// runners (the worker's, the gate runner's, package jobrun's) and of the
// coordinator's engine, which plays the runners, the fixture they share, a
// Fleet: an embedded NATS server with the fleet's resources, a state
// store, a sample repository uploaded as a bundle, and the reports runners
// send. The generic helpers (logger, context, git, files) are testkit's.
package jobruntest

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

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
	// Log is the test's logger (see testkit.Logger).
	Log *slog.Logger
	// RepoDir is the repository's working tree, at its one commit (see
	// UploadRepo).
	RepoDir string
	// Repo refers to the repository's uploaded bundle and its commit.
	Repo protocol.RepoRef
	// Reports receives every valid report on the results stream, in order
	// (buffered: 100; see ConsumeReports).
	Reports chan *protocol.Report

	t testing.TB
}

// NewFleet is OpenFleet, with files (paths relative to the repository, and
// their contents) uploaded as a repository (UploadRepo) and the results
// stream consumed into Reports (ConsumeReports).
func NewFleet(t testing.TB, name string, cfg bus.Config, files map[string]string) *Fleet {
	t.Helper()
	f := OpenFleet(t, name, cfg)
	f.UploadRepo(files)
	f.ConsumeReports()
	return f
}

// OpenFleet starts an embedded NATS server for the test, opens a bus on it
// named name with cfg and a state store on that bus: a fleet with no
// repository yet whose reports nobody receives. Everything stops when the
// test ends; it fails the test if any step fails.
func OpenFleet(t testing.TB, name string, cfg bus.Config) *Fleet {
	t.Helper()
	f := &Fleet{t: t, Config: cfg, Log: testkit.Logger(t)}
	ctx := testkit.Context(t, time.Minute)
	f.URL = testkit.NATS(t)
	b, err := bus.Open(ctx, f.URL, name, cfg, f.Log)
	if err != nil {
		t.Fatalf("bus: %v", err)
	}
	t.Cleanup(b.Close)
	f.Bus = b
	if f.Store, err = kvstate.New(ctx, b.JS); err != nil {
		t.Fatalf("kvstate: %v", err)
	}
	return f
}

// UploadRepo commits files (paths relative to the repository, and their
// contents) as the one commit of a new repository on branch main, and
// uploads the repository as a bundle the way the CLI does; RepoDir and
// Repo then name it.
func (f *Fleet) UploadRepo(files map[string]string) {
	t := f.t
	t.Helper()
	ctx := testkit.Context(t, time.Minute)
	dir, commit := testkit.Repo(t, files)
	id, err := workspace.RepoID(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "repo.bundle")
	if err := workspace.CreateBundle(ctx, dir, commit, bundle); err != nil {
		t.Fatal(err)
	}
	object := id + "/" + commit + ".bundle"
	if _, err := f.Bus.Bundles.PutBytes(ctx, object, testkit.ReadFile(t, bundle)); err != nil {
		t.Fatalf("upload bundle: %v", err)
	}
	f.RepoDir = dir
	f.Repo = protocol.RepoRef{ID: id, BaseCommit: commit, Bundle: object}
}

// ConsumeReports receives the results stream into Reports as the
// coordinator's side of it does, until the test ends.
func (f *Fleet) ConsumeReports() {
	t, b := f.t, f.Bus
	t.Helper()
	ctx := testkit.Context(t, time.Minute)
	f.Reports = make(chan *protocol.Report, 100)
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
}

// Next returns the next report, failing the test if none arrives within
// the duration given.
func (f *Fleet) Next(within time.Duration) *protocol.Report {
	f.t.Helper()
	return testkit.Receive(f.t, f.Reports, within, "no report")
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
	ctx := testkit.Context(f.t, time.Minute)
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
