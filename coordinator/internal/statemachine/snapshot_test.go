package statemachine_test

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// logged returns the events as the log gives them back: encoded, then
// decoded, with their sequences.
func logged(t testing.TB, events []eventlog.Event) []eventlog.Event {
	t.Helper()
	out := make([]eventlog.Event, len(events))
	for i, ev := range events {
		data, err := eventlog.Encode(ev)
		if err != nil {
			t.Fatalf("encode %s: %v", describeEvent(ev), err)
		}
		back, err := eventlog.Decode(data)
		if err != nil {
			t.Fatalf("decode %s: %v", describeEvent(ev), err)
		}
		back.Seq = ev.Seq
		out[i] = back
	}
	return out
}

// prefixes folds every prefix of the log: prefixes[k] is the state after
// its first k events.
func prefixes(t testing.TB, events []eventlog.Event) []*statemachine.State {
	t.Helper()
	out := make([]*statemachine.State, len(events)+1)
	for k := range out {
		st := statemachine.New()
		for _, ev := range events[:k] {
			_ = st.Apply(ev) // an event that does not fold fails alike in every fold
		}
		out[k] = st
	}
	return out
}

// fold folds the events into a new state.
func fold(events []eventlog.Event) *statemachine.State {
	st := statemachine.New()
	for _, ev := range events {
		_ = st.Apply(ev)
	}
	return st
}

// snapshotOf writes a snapshot the way the engine does: the fleet and the
// listing as of base, each workflow in memory as of later(id) (a state at
// or after base, the workflow's record being written after the snapshot's
// sequence was taken).
func snapshotOf(t testing.TB, base *statemachine.State, later func(id string) *statemachine.State) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := statemachine.NewSnapshotEncoder(&buf)
	if err := enc.Fleet(base.Fleet()); err != nil {
		t.Fatal(err)
	}
	for _, e := range base.Listing() {
		var err error
		if e.Retired != nil {
			err = enc.Retired(e.Retired)
		} else {
			w, ok := later(e.Workflow.ID).Workflow(e.Workflow.ID)
			if !ok {
				t.Fatalf("workflow %s is gone from the later state", e.Workflow.ID)
			}
			err = enc.Workflow(w)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// restore reads a snapshot and folds the tail of the log after it; the
// workflows the tail names that are retired are reloaded from their own
// events of the whole log, as the engine reloads them.
func restore(t testing.TB, snap []byte, all, tail []eventlog.Event) *statemachine.State {
	t.Helper()
	st, err := statemachine.DecodeSnapshot(bytes.NewReader(snap), int64(len(snap)))
	if err != nil {
		t.Fatalf("decode snapshot: %v", err)
	}
	reload := map[string]bool{}
	var mark statemachine.TailMark
	for _, ev := range tail {
		out, _ := st.ApplyTail(ev, &mark)
		if out == statemachine.TailRetired {
			reload[ev.WorkflowID] = true
		}
	}
	for id := range reload {
		one := statemachine.New()
		for _, ev := range all {
			if ev.WorkflowID == id {
				_ = one.Apply(ev)
			}
		}
		w, ok := one.Workflow(id)
		if !ok {
			t.Fatalf("reload %s: no submission", id)
		}
		st.Put(w)
	}
	return st
}

// checkCuts cuts the log at every point k and checks that a snapshot
// there, its workflows' records written as of a later point (k plus each
// of skews, one per workflow in turn), read back and followed by the rest
// of the log gives exactly the state the full replay gives.
func checkCuts(t *testing.T, events []eventlog.Event, skews []int) {
	t.Helper()
	states := prefixes(t, events)
	full := states[len(events)]
	// A snapshot's sequence and a workflow's record fall between
	// messages, never inside a batch.
	boundary := func(k int) int {
		for k < len(events) && events[k].Index > 0 {
			k++
		}
		return k
	}
	for k := range states {
		if boundary(k) != k {
			continue
		}
		for _, skew := range skews {
			i := 0
			perWorkflow := map[string]int{}
			later := func(id string) *statemachine.State {
				if _, ok := perWorkflow[id]; !ok {
					perWorkflow[id] = boundary(min(len(events), k+skew*((i+1)%2)+i%3)) // the first at k+skew, others at k or a little later
					i++
				}
				return states[perWorkflow[id]]
			}
			snap := snapshotOf(t, states[k], later)
			got := restore(t, snap, events, events[k:])
			if !reflect.DeepEqual(got, full) {
				t.Fatalf("a snapshot after %d of %d events (skew %d) and the rest of the log give another state than the full replay: %s",
					k, len(events), skew, firstDiff(got, full))
			}
		}
	}
}

// A snapshot taken anywhere in the recorded log — six workflows with
// layered gates, a reopened node, an integrity violation, pending gates,
// gate changes, a dead letter and a cancellation — followed by the rest of
// the log folds into exactly the state the full replay folds into, also
// when each workflow's record is written after the snapshot's sequence
// (PERF-31).
func TestSnapshotOfRecordedLogAtEveryCut(t *testing.T) {
	events := recordedLog(t)
	checkCuts(t, events, []int{0, 1, 9, len(events)})
}

// The same holds when the log's messages hold batches (PERF-57): runs of
// one workflow's events share a sequence, and a workflow's record written
// after the snapshot's sequence ends where a message does. An event of a
// batch the record has is not folded again, and one of a batch it lacks
// is, though the batch's first event has already moved the workflow's
// LastSeq to the batch's sequence.
func TestSnapshotOfBatchedLogAtEveryCut(t *testing.T) {
	for _, size := range []int{2, 3, 5} {
		events := batched(recordedLog(t), size)
		shared := 0
		for _, ev := range events {
			if ev.Index > 0 {
				shared++
			}
		}
		if shared < len(events)/4 {
			t.Fatalf("batches of %d: only %d of %d events share a message", size, shared, len(events))
		}
		checkCuts(t, events, []int{0, 1, 4, len(events)})
	}
}

// batched re-sequences a log as the engine would append it in batches of
// at most size: consecutive events of one workflow share a message (its
// sequence, Index counting within it), but an event bringing tasks in,
// which is always alone.
func batched(events []eventlog.Event, size int) []eventlog.Event {
	out := make([]eventlog.Event, len(events))
	var seq uint64
	alone := func(ev eventlog.Event) bool {
		_, sub := ev.Body.(eventlog.WorkflowSubmitted)
		_, add := ev.Body.(eventlog.NodesAdded)
		return sub || add
	}
	for i, ev := range events {
		joins := i > 0 && !alone(ev) && !alone(events[i-1]) && ev.WorkflowID == events[i-1].WorkflowID &&
			out[i-1].Index+1 < size
		if joins {
			ev.Index = out[i-1].Index + 1
		} else {
			seq++
			ev.Index = 0
		}
		ev.Seq = seq
		out[i] = ev
	}
	return out
}

// Retiring the finished workflows before the snapshot changes nothing
// about the state after the tail, once the engine's rule is followed:
// workflows the tail names are reloaded from their events, and finished
// ones retired again.
func TestSnapshotWithRetiredWorkflowsAtEveryCut(t *testing.T) {
	events := recordedLog(t)
	states := prefixes(t, events)
	retireFinished := func(st *statemachine.State) {
		for _, w := range st.Workflows() {
			if w.Retirable(w.FinishedAt, 0) {
				st.Retire(w.ID)
			}
		}
	}
	full := fold(events)
	retireFinished(full)
	if full.RetiredLen() == 0 || full.Len() == 0 {
		t.Fatalf("the recorded log should end with finished and running workflows: %d retired, %d in memory",
			full.RetiredLen(), full.Len())
	}
	for k := range states {
		base := fold(events[:k])
		retireFinished(base)
		snap := snapshotOf(t, base, func(string) *statemachine.State { return base })
		got := restore(t, snap, events, events[k:])
		retireFinished(got)
		if !reflect.DeepEqual(got, full) {
			t.Fatalf("with retired workflows, a snapshot after %d of %d events and the rest of the log give another state: %s",
				k, len(events), firstDiff(got, full))
		}
	}
}

// FuzzSnapshotCut drives a workflow — the fuzz workflow of
// FuzzReplayIsDeterministic or the integration queue's of
// FuzzIntegrationQueue, chosen by the first byte — through the script,
// then cuts its log at every point: snapshot and rest give the full
// replay's state.
func FuzzSnapshotCut(f *testing.F) {
	for _, seed := range [][]byte{
		{0},
		{0, 0, 1, 2, 3, 3, 3, 0, 4, 0},
		{0, 2, 0, 3, 2, 4, 20, 3, 2, 4, 200, 0, 7, 0},
		{0, 2, 0, 9, 1, 3, 0, 9, 2, 3, 3, 5, 1, 8, 0, 6, 3},
		{1, 0, 0, 0, 1, 1, 1, 2, 0, 2, 1, 2, 0, 2, 1},
		{1, 0, 1, 1, 0, 2, 3, 2, 0, 6, 5, 2, 3, 4, 30, 0, 0, 1, 1, 2},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) == 0 {
			return
		}
		if len(script) > 120 {
			script = script[:120]
		}
		var w *world
		if script[0]%2 == 0 {
			w, _ = newWorld(t, fuzzWorkflow, true)
			drive(w, script[1:])
		} else {
			w, _ = newWorld(t, queueFuzzWorkflow, true)
			driveQueue(w, script[1:])
		}
		checkCuts(t, logged(t, w.events), []int{0, 3})
	})
}

// A snapshot that is cut short, damaged, or whose records are not a fleet
// then workflows, is refused as a whole, never half read, and never makes
// the reader allocate what its lengths claim beyond its size.
func TestDecodeSnapshotRefusesDamage(t *testing.T) {
	events := recordedLog(t)
	st := fold(events)
	snap := snapshotOf(t, st, func(string) *statemachine.State { return st })
	flip := func(i int) []byte {
		b := bytes.Clone(snap)
		b[i] ^= 0xff
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"cut in a record", snap[:len(snap)/2]},
		{"without its end", snap[:len(snap)-1]},
		{"bytes after the end", append(bytes.Clone(snap), 0)},
		{"no fleet record first", append([]byte{'W'}, snap[1:]...)},
		{"an unknown record", append([]byte{'F', 0, 0, 0, 0, 0, 0, 'X'}, snap[1:]...)},
		{"a huge length", append([]byte{'F', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, snap[1:]...)},
		{"a flag that is not one", flip(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := statemachine.DecodeSnapshot(bytes.NewReader(tc.data), int64(len(tc.data))); err == nil {
				t.Fatal("a damaged snapshot was read")
			}
		})
	}
	got, err := statemachine.DecodeSnapshot(bytes.NewReader(snap), int64(len(snap)))
	if err != nil {
		t.Fatalf("the undamaged snapshot: %v", err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("the snapshot read back differs: %s", firstDiff(got, st))
	}
	again := snapshotOf(t, got, func(string) *statemachine.State { return got })
	if !bytes.Equal(again, snap) {
		t.Fatal("writing the state read back gives other bytes")
	}
}

// Retiring keeps what the workflow list shows and the log's position, and
// a retired workflow is back in its place once put back.
func TestRetireAndPutBack(t *testing.T) {
	events := recordedLog(t)
	st := prefixes(t, events)[len(events)]
	var finished *statemachine.Workflow
	for _, w := range st.Workflows() {
		if w.Status.Terminal() {
			finished = w
			break
		}
	}
	if finished == nil {
		t.Fatal("no finished workflow in the recorded log")
	}
	if !finished.Retirable(finished.FinishedAt.Add(time.Hour), time.Hour) || finished.Retirable(finished.FinishedAt.Add(time.Minute), time.Hour) {
		t.Fatal("retirable before its retention, or not after it")
	}
	before := st.Listing()
	if !st.Retire(finished.ID) || st.Retire(finished.ID) {
		t.Fatal("Retire reports retiring a workflow other than once")
	}
	if _, ok := st.Workflow(finished.ID); ok {
		t.Fatal("a retired workflow is still in memory")
	}
	r, ok := st.Retired(finished.ID)
	if !ok || r.LastSeq != finished.LastSeq || st.LastSeq(finished.ID) != finished.LastSeq || r.Status != finished.Status {
		t.Fatalf("retired summary %+v does not keep the workflow's status and last sequence %d", r, finished.LastSeq)
	}
	after := st.Listing()
	if len(after) != len(before) {
		t.Fatalf("the listing has %d workflows after retiring, %d before", len(after), len(before))
	}
	for i := range after {
		id := before[i].Workflow.ID
		if got := entryID(after[i]); got != id {
			t.Fatalf("listing position %d: %s, want %s", i, got, id)
		}
	}
	ev := eventlog.Event{WorkflowID: finished.ID, Seq: finished.LastSeq + 1000, Time: finished.FinishedAt,
		Body: eventlog.WorkflowCancelRequested{}}
	if err := st.Apply(ev); err == nil || !strings.Contains(err.Error(), statemachine.ErrRetired.Error()) {
		t.Fatalf("folding an event of a retired workflow: %v, want ErrRetired", err)
	}
	st.Put(finished)
	if _, ok := st.Retired(finished.ID); ok {
		t.Fatal("put back, the workflow is still retired")
	}
	for i, e := range st.Listing() {
		if entryID(e) != before[i].Workflow.ID || e.Workflow == nil {
			t.Fatalf("after putting it back, listing position %d is %s", i, entryID(e))
		}
	}
}

func entryID(e statemachine.Entry) string {
	if e.Workflow != nil {
		return e.Workflow.ID
	}
	return e.Retired.ID
}

// firstDiff names the first path where a and b differ (deep, unexported
// fields included), "" when none does: what a failed check shows.
func firstDiff(a, b any) string {
	return diffValues(reflect.ValueOf(a), reflect.ValueOf(b), "state", map[[2]uintptr]bool{})
}

func diffValues(a, b reflect.Value, path string, seen map[[2]uintptr]bool) string {
	if a.IsValid() != b.IsValid() {
		return path + ": one is invalid"
	}
	if !a.IsValid() {
		return ""
	}
	if a.Type() != b.Type() {
		return path + ": types differ"
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() != b.IsNil() {
			return fmt.Sprintf("%s: nil %v vs %v", path, a.IsNil(), b.IsNil())
		}
		if a.IsNil() {
			return ""
		}
		if a.Kind() == reflect.Pointer {
			key := [2]uintptr{a.Pointer(), b.Pointer()}
			if seen[key] {
				return ""
			}
			seen[key] = true
		}
		return diffValues(a.Elem(), b.Elem(), path, seen)
	case reflect.Struct:
		for i := range a.NumField() {
			if d := diffValues(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name, seen); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && a.IsNil() != b.IsNil() {
			return fmt.Sprintf("%s: nil %v vs %v", path, a.IsNil(), b.IsNil())
		}
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: length %d vs %d", path, a.Len(), b.Len())
		}
		for i := range a.Len() {
			if d := diffValues(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), seen); d != "" {
				return d
			}
		}
		return ""
	case reflect.Map:
		if a.IsNil() != b.IsNil() {
			return fmt.Sprintf("%s: nil %v vs %v", path, a.IsNil(), b.IsNil())
		}
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: %d vs %d entries", path, a.Len(), b.Len())
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() {
				return fmt.Sprintf("%s[%v]: missing", path, k)
			}
			if d := diffValues(a.MapIndex(k), bv, fmt.Sprintf("%s[%v]", path, k), seen); d != "" {
				return d
			}
		}
		return ""
	case reflect.String:
		if a.String() != b.String() {
			return fmt.Sprintf("%s: %q vs %q", path, a.String(), b.String())
		}
	case reflect.Bool:
		if a.Bool() != b.Bool() {
			return fmt.Sprintf("%s: %v vs %v", path, a.Bool(), b.Bool())
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if a.Int() != b.Int() {
			return fmt.Sprintf("%s: %d vs %d", path, a.Int(), b.Int())
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if a.Uint() != b.Uint() {
			return fmt.Sprintf("%s: %d vs %d", path, a.Uint(), b.Uint())
		}
	case reflect.Float32, reflect.Float64:
		if a.Float() != b.Float() {
			return fmt.Sprintf("%s: %v vs %v", path, a.Float(), b.Float())
		}
	}
	return ""
}
