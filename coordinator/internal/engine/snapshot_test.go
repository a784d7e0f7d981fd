package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// snapshotList lists the snapshots in the bucket, newest first.
func (e *env) snapshotList() []*jetstream.ObjectInfo {
	e.t.Helper()
	ctx := testkit.Context(e.t, 10*time.Second)
	store, err := e.b.Snapshots(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	list, err := snapshotsNewestFirst(ctx, store, DefaultSnapshotListWait)
	if err != nil {
		e.t.Fatal(err)
	}
	return list
}

// lastSeq is the event log's last sequence.
func (e *env) lastSeq() uint64 {
	e.t.Helper()
	ctx := testkit.Context(e.t, 10*time.Second)
	s, err := e.b.JS.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.LastSeq
}

// sameAsFullReplay checks that eng's state is what folding the whole log
// gives: every workflow (all exported fields, the last sequence its
// appends are fenced on included), retired summary and the fleet. (The
// statemachine tests check the fold itself field by field; here the live
// fold's values taken from a submission, such as an empty list the log's
// JSON writes as none, may differ from the replay's in form only.)
func sameAsFullReplay(t *testing.T, eng *Engine) {
	t.Helper()
	full, _, err := eng.fold(testkit.Context(t, 20*time.Second), protocol.SubjectEvents)
	if err != nil {
		t.Fatal(err)
	}
	view := func(s *statemachine.State) string {
		type entry struct {
			W *statemachine.Workflow `json:",omitempty"`
			R *statemachine.Retired  `json:",omitempty"`
		}
		var out []entry
		for _, e := range s.Listing() {
			out = append(out, entry{e.Workflow, e.Retired})
		}
		b, err := json.Marshal(struct {
			Fleet     *statemachine.Fleet
			Workflows []entry
		}{s.Fleet(), out})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The full replay retires nothing: compare with the retired ones
	// read back.
	var got, want string
	eng.Read(func(s *statemachine.State) {
		if s.RetiredLen() == 0 {
			got = view(s)
		}
	})
	if got == "" {
		t.Fatal("sameAsFullReplay needs a state without retired workflows")
	}
	want = view(full)
	if got != want {
		t.Errorf("the state rebuilt on start differs from the full replay:\n got %s\nwant %s", got, want)
	}
}

// runNoGates runs a one-task workflow without gates to success.
func (e *env) runNoGates(name string) string {
	e.t.Helper()
	wf := e.submit("name: " + name + "\ndefaults:\n  " + agentCmd + "tasks:\n  - id: only\n    prompt: hi\n")
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(j, 1)
	e.agentDone(j, 1, protocol.AgentSucceeded, e.work(j, map[string]string{name + ".txt": name + "\n"}))
	e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	return wf
}

// escalateOne submits a workflow whose only attempt fails, leaving it
// waiting for a human.
func (e *env) escalateOne() string {
	e.t.Helper()
	wf := e.submit("name: esc\ndefaults:\n  " + agentCmd + "  max_attempts: 1\ntasks:\n  - id: x\n    prompt: x\n")
	x := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(x, 1)
	e.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: x.id(), WorkflowID: wf, NodeID: "x", Attempt: 1, LeaseToken: 1, Status: protocol.AgentFailed,
		ExitCode: 3, Error: "boom"}}, "x-result")
	_ = x.msg.Ack()
	e.waitEscalated(wf, "x")
	return wf
}

// A coordinator that stops cleanly leaves a snapshot covering the whole
// log; the next one starts from the newest snapshot plus the events after
// it, and its state is exactly what the full replay gives (PERF-30,
// PERF-31).
func TestRestartFromSnapshotAndTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	first := e.runNoGates("one")
	e.stopEng()
	// (The leader may also have written one while the workflow ran.)
	list := e.snapshotList()
	if len(list) == 0 || list[0].Name != snapshotName(e.lastSeq()) {
		t.Fatalf("after a clean stop: snapshots %v, want the newest covering sequence %d", names(list), e.lastSeq())
	}
	older := list[0].Name

	e.start()
	esc := e.escalateOne()
	e.stopEng()
	list = e.snapshotList()
	if len(list) < 2 || list[0].Name != snapshotName(e.lastSeq()) {
		t.Fatalf("after the second stop: snapshots %v, want the newest covering sequence %d", names(list), e.lastSeq())
	}
	// Drop the ones newer than the first stop's: the next start has that
	// one and the events of the second workflow after it.
	ctx := testkit.Context(t, 10*time.Second)
	store, err := e.b.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list {
		if o.Name > older {
			if err := store.Delete(ctx, o.Name); err != nil {
				t.Fatal(err)
			}
		}
	}

	var logBuf testkit.Buffer
	eng := e.start(startOptions{log: slog.New(slog.NewJSONHandler(&logBuf, nil))})
	r := testkit.LogRecord(t, logBuf.String(), "state rebuilt from a snapshot and the events after it", "snapshot", older)
	if n, _ := r["events"].(float64); n < 3 {
		t.Errorf("rebuilt with %v events after the snapshot, want the second workflow's", r["events"])
	}
	sameAsFullReplay(t, eng)
	if s := e.status(first); s.Status != protocol.WorkflowSucceeded {
		t.Errorf("first workflow after the restart: %s", s.Status)
	}
	if n := nodeOf(e.status(esc), "x"); n.Status != protocol.NodeEscalated {
		t.Errorf("escalated node after the restart: %s", n.Status)
	}
}

func names(list []*jetstream.ObjectInfo) []string {
	var out []string
	for _, o := range list {
		out = append(out, o.Name)
	}
	return out
}

// A snapshot of another format version or schema, of another event log,
// or whose payload is damaged is ignored with a log line saying why, and
// the next older one is used; the state is still the full replay's
// (PERF-32).
func TestUnusableSnapshotsAreIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	e.runNoGates("one")
	e.stopEng()
	good := e.snapshotList()[0].Name
	e.start()
	e.runNoGates("two")
	e.stopEng()
	newest := e.snapshotList()[0]
	if newest.Name == good {
		t.Fatal("no newer snapshot after more events")
	}
	ctx := testkit.Context(t, 60*time.Second)
	store, err := e.b.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Only good and newest: the leader may have written others while the
	// second workflow ran.
	for _, o := range e.snapshotList() {
		if o.Name > good && o.Name < newest.Name {
			if err := store.Delete(ctx, o.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	payload, err := store.GetBytes(ctx, newest.Name)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	with := func(k, v string) map[string]string {
		md := map[string]string{}
		for key, val := range newest.Metadata {
			md[key] = val
		}
		md[k] = v
		return md
	}
	flipped := bytes.Clone(payload)
	flipped[len(flipped)/2] ^= 0x55
	garbage := bytes.Repeat([]byte{'W', 1}, 64)
	for _, tc := range []struct {
		name    string
		meta    map[string]string
		payload []byte
		why     string
	}{
		{"a newer format version", with(metaVersion, strconv.Itoa(SnapshotVersion+1)), payload, "format version"},
		{"other state types", with(metaSchema, "0123456789abcdef"), payload, "other state types"},
		{"another event log", with(metaLog, "2001-01-01T00:00:00Z first 1"), payload, "another event log"},
		{"a damaged payload", newest.Metadata, flipped, "corrupt"},
		{"a payload cut short", newest.Metadata, payload[:len(payload)-3], "corrupt"},
		{"records that do not decode", with(metaSHA256, sum(garbage)), garbage, "does not decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta := tc.meta
			if tc.why == "does not decode" {
				meta = with(metaSHA256, sum(garbage))
				meta[metaSize] = strconv.Itoa(len(garbage))
			}
			if _, err := store.Put(ctx, jetstream.ObjectMeta{Name: newest.Name, Metadata: meta}, bytes.NewReader(tc.payload)); err != nil {
				t.Fatal(err)
			}
			var logBuf testkit.Buffer
			eng := e.start(startOptions{log: slog.New(slog.NewJSONHandler(&logBuf, nil))})
			r := testkit.LogRecord(t, logBuf.String(), "snapshot ignored", "snapshot", newest.Name)
			if why, _ := r["why"].(string); !strings.Contains(why, tc.why) {
				t.Errorf("ignored because %q, want %q", why, tc.why)
			}
			testkit.LogRecord(t, logBuf.String(), "state rebuilt from a snapshot and the events after it", "snapshot", good)
			sameAsFullReplay(t, eng)
			e.stopEng() // writes a good newest snapshot again
		})
	}
}

// waitRetired waits until the engine has retired workflow wf.
func (e *env) waitRetired(wf string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		retired := false
		e.eng.Read(func(s *statemachine.State) { _, retired = s.Retired(wf) })
		if retired {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("workflow %s was not retired", wf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A finished workflow leaves memory after the retention, and is still
// what status, show, logs and the list show of it; a command on it brings
// it back first (a merge of a retired succeeded workflow merges it); a
// restart keeps it retired, in the list (PERF-33…PERF-35).
func TestRetiredWorkflowsStayQueryable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	testkit.Git(t, e.repoDir, "branch", "release", e.repo.BaseCommit)
	e.start(startOptions{retainFinished: time.Hour})
	kept := e.runOne("", "release", map[string]string{"a.txt": "a\n"})
	running := e.escalateOne()
	ctx := testkit.Context(t, 60*time.Second)
	before := e.status(kept.ID)
	show, err := e.client.Show(ctx, kept.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	logs, err := e.client.Logs(ctx, kept.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	list, err := e.client.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.stopEng()

	e.start(startOptions{retainFinished: 50 * time.Millisecond})
	e.waitRetired(kept.ID)
	e.eng.Read(func(s *statemachine.State) {
		if _, ok := s.Workflow(running); !ok {
			t.Error("the workflow waiting for a human was retired")
		}
	})
	same := func(what string, got, want any, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s of a retired workflow: %v", what, err)
			return
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Errorf("%s of the retired workflow differs from before:\n got %s\nwant %s", what, g, w)
		}
	}
	gotStatus, err := e.client.Status(ctx, kept.ID)
	same("status", gotStatus, before, err)
	gotShow, err := e.client.Show(ctx, kept.ID, "a")
	same("show", gotShow, show, err)
	gotLogs, err := e.client.Logs(ctx, kept.ID, "a")
	same("logs", gotLogs, logs, err)
	gotList, err := e.client.List(ctx)
	same("list", gotList, list, err)
	if _, err := e.client.Status(ctx, "wf-nosuchthing"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("status of an unknown workflow: %v, want not found", err)
	}

	// A merge brings it back into memory and merges it.
	s := e.mergeAPI(kept.ID, "")
	if m := s.Merge; m.Status != "merged" || m.Into != "release" {
		t.Fatalf("merge of a retired workflow = %+v", m)
	}
	if tip := e.tip("release"); tip != kept.Head {
		t.Fatalf("release = %s, want %s", tip, kept.Head)
	}
	e.waitRetired(kept.ID) // merged: nothing left to do, retired again
	e.stopEng()

	e.start(startOptions{retainFinished: 50 * time.Millisecond})
	e.eng.Read(func(s *statemachine.State) {
		if _, ok := s.Retired(kept.ID); !ok {
			t.Error("after a restart from the snapshot, the retired workflow is not retired")
		}
	})
	after := e.status(kept.ID)
	if after.Merge == nil || after.Merge.Status != "merged" {
		t.Errorf("status after the restart: merge %+v", after.Merge)
	}
	l, err := e.client.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Workflows) != 2 || l.Workflows[0].ID != kept.ID || l.Workflows[1].ID != running {
		t.Errorf("list after the restart: %+v", l.Workflows)
	}
}

// A snapshot listing that never ends does not keep a new leader from
// becoming ready: the listing is given up after SnapshotListWait and the
// whole log is folded. The object store's listing waits without end when
// the store is empty and its last message cannot be looked up, as on a
// just-formed cluster whose snapshots stream has no leader yet; here NATS
// denies the coordinator that lookup (PERF-32).
func TestSnapshotListingThatNeverEndsIsGivenUp(t *testing.T) {
	t.Parallel()
	stream := "OBJ_" + protocol.BucketSnapshots
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Users: []*server.User{{Username: "coordinator", Password: "secret", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"},
				Deny: []string{"$JS.API.DIRECT.GET." + stream + ".>", "$JS.API.STREAM.MSG.GET." + stream}},
			Subscribe: &server.SubjectPermission{Allow: []string{">"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	url := fmt.Sprintf("nats://coordinator:secret@%s", srv.Addr())
	ctx := testkit.Context(t, time.Minute)
	b, err := bus.Open(ctx, url, t.Name(), bus.Config{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	snaps, err := b.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The library's listing of the empty store does wait past any bound.
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = snaps.List(lctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("listing the empty store with its lookup denied: %v, want it to wait out its context", err)
	}

	store, err := kvstate.New(ctx, b.JS)
	if err != nil {
		t.Fatal(err)
	}
	var logBuf testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&logBuf, nil))
	eng, err := New(b, store, Options{DataDir: t.TempDir(), Tick: 100 * time.Millisecond, LeaderTTL: 10 * time.Second,
		Log: log, SnapshotListWait: 500 * time.Millisecond, RepoRoots: tempRoots(t)})
	if err != nil {
		t.Fatal(err)
	}
	runEngine(t, "engine", eng, service.New(eng, b, service.Options{Log: log, RepoRoots: tempRoots(t)}))
	r := testkit.LogRecord(t, logBuf.String(), "cannot read snapshots; folding the whole event log", "level", "WARN")
	if msg, _ := r["err"].(string); !strings.Contains(msg, "gave nothing for 500ms") {
		t.Errorf("warning's error %q, want it to say the listing was given up", msg)
	}
}

// Only the newest keepSnapshots snapshots are kept, and the store keeps
// no record of those deleted: a listing delivers what is there, not one
// record per snapshot ever written. A deleted snapshot's record left by
// an earlier coordinator is removed too (PERF-30).
func TestOldSnapshotsLeaveNoRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	eng := e.start()
	ctx := testkit.Context(t, time.Minute)
	store, err := e.b.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A record of a snapshot deleted by a coordinator before this one.
	if _, err := store.PutBytes(ctx, snapshotName(1), []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, snapshotName(1)); err != nil {
		t.Fatal(err)
	}
	var written []string
	for i := range keepSnapshots + 2 {
		e.runNoGates(fmt.Sprintf("w%d", i))
		si, err := eng.WriteSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, si.Name)
	}
	want := slices.Clone(written[len(written)-keepSnapshots:])
	slices.Reverse(want)
	if got := names(e.snapshotList()); !slices.Equal(got, want) {
		t.Fatalf("snapshots %v, want the newest %d of %v", got, keepSnapshots, written)
	}
	s, err := e.b.JS.Stream(ctx, "OBJ_"+protocol.BucketSnapshots)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("$O."+protocol.BucketSnapshots+".M.>"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != keepSnapshots {
		t.Errorf("the store holds records of %d objects (%v), want the %d kept", len(info.State.Subjects), info.State.Subjects, keepSnapshots)
	}
	all, err := listSnapshots(ctx, store, DefaultSnapshotListWait, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != keepSnapshots {
		t.Errorf("a listing with deleted records gives %v, want the %d kept", names(all), keepSnapshots)
	}
	sameAsFullReplay(t, eng)
}
