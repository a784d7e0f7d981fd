package statemachine

// Snapshots of the fold (PERF-30): the state written out record by record
// (the fleet, then every workflow and retired workflow in submission
// order) and read back into a State that folds the rest of the log exactly
// as the state it was taken from would. The engine wraps the records in a
// versioned, checksummed object (engine/snapshot.go); this file knows only
// the records, written with the exact value codec of snapcodec.go.

import (
	"bufio"
	"fmt"
	"io"
	"reflect"

	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// Record kinds, the first byte of each record.
const (
	recFleet    byte = 'F'
	recWorkflow byte = 'W'
	recRetired  byte = 'R'
	recEnd      byte = 'E'
)

// SnapshotSchema identifies the shape of the records this code writes
// and reads: a snapshot written under another schema is not read.
var SnapshotSchema = typeFingerprint(reflect.TypeFor[Fleet](), reflect.TypeFor[Workflow](), reflect.TypeFor[Retired]())

// SnapshotEncoder writes the records of a snapshot to a stream.
type SnapshotEncoder struct {
	vw *valueWriter
	n  int
}

// NewSnapshotEncoder writes records to w; Close writes the end record and
// flushes.
func NewSnapshotEncoder(w io.Writer) *SnapshotEncoder {
	return &SnapshotEncoder{vw: &valueWriter{w: bufio.NewWriterSize(w, 64<<10)}}
}

// Records is the number of records written.
func (e *SnapshotEncoder) Records() int { return e.n }

func (e *SnapshotEncoder) write(kind byte, v any) error {
	if err := e.vw.w.WriteByte(kind); err != nil {
		return fmt.Errorf("statemachine: write snapshot record: %w", err)
	}
	if err := e.vw.value(reflect.ValueOf(v).Elem()); err != nil {
		return fmt.Errorf("statemachine: write snapshot record: %w", err)
	}
	e.n++
	return nil
}

// Fleet writes the fleet's state. The fleet's record comes first.
func (e *SnapshotEncoder) Fleet(f *Fleet) error { return e.write(recFleet, f) }

// Workflow writes workflow w, which the reader takes in memory.
func (e *SnapshotEncoder) Workflow(w *Workflow) error { return e.write(recWorkflow, w) }

// Retired writes the summary of a retired workflow.
func (e *SnapshotEncoder) Retired(r *Retired) error { return e.write(recRetired, r) }

// Close ends the snapshot and flushes what is buffered.
func (e *SnapshotEncoder) Close() error {
	if err := e.vw.w.WriteByte(recEnd); err != nil {
		return fmt.Errorf("statemachine: write snapshot: %w", err)
	}
	if err := e.vw.w.Flush(); err != nil {
		return fmt.Errorf("statemachine: write snapshot: %w", err)
	}
	return nil
}

// DecodeSnapshot reads the size bytes of records NewSnapshotEncoder wrote
// into a new state: the workflows and retired ones in the order they were
// written. Records that do not decode, are not what they claim, or end
// before the end record are an error: the snapshot is then not to be
// used.
func DecodeSnapshot(r io.Reader, size int64) (*State, error) {
	st := New()
	vr := &valueReader{r: bufio.NewReaderSize(r, 64<<10), limit: size}
	for i := 0; ; i++ {
		kind, err := vr.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("statemachine: snapshot record %d: %w", i, err)
		}
		switch {
		case kind == recFleet && i == 0:
			if err := vr.value(reflect.ValueOf(st.fleet).Elem()); err != nil {
				return nil, fmt.Errorf("statemachine: snapshot record %d (fleet): %w", i, err)
			}
		case kind == recWorkflow && i > 0:
			w := &Workflow{}
			if err := vr.value(reflect.ValueOf(w).Elem()); err != nil {
				return nil, fmt.Errorf("statemachine: snapshot record %d (workflow): %w", i, err)
			}
			if w.ID == "" || w.Spec == nil || w.Nodes == nil || st.known(w.ID) {
				return nil, fmt.Errorf("statemachine: snapshot record %d: workflow %q without its id, spec or nodes, or twice", i, w.ID)
			}
			if err := w.relink(); err != nil {
				return nil, fmt.Errorf("statemachine: snapshot record %d: workflow %s: %w", i, w.ID, err)
			}
			st.Put(w)
		case kind == recRetired && i > 0:
			rt := &Retired{}
			if err := vr.value(reflect.ValueOf(rt).Elem()); err != nil {
				return nil, fmt.Errorf("statemachine: snapshot record %d (retired workflow): %w", i, err)
			}
			if rt.ID == "" || st.known(rt.ID) {
				return nil, fmt.Errorf("statemachine: snapshot record %d: retired workflow %q without its id, or twice", i, rt.ID)
			}
			st.order = append(st.order, rt.ID)
			st.retired[rt.ID] = rt
		case kind == recEnd && i > 0:
			if vr.limit != 0 {
				return nil, fmt.Errorf("statemachine: snapshot: %d bytes after the end record", vr.limit)
			}
			return st, nil
		default:
			return nil, fmt.Errorf("statemachine: snapshot record %d of kind %q: not a fleet (first), workflow, retired workflow or end",
				i, kind)
		}
	}
}

// TailOutcome is what ApplyTail did with an event.
type TailOutcome int

// What ApplyTail did.
const (
	// TailFolded: the event was folded in (or failed to fold, as Apply).
	TailFolded TailOutcome = iota
	// TailHad: the snapshot's workflow already had the event.
	TailHad
	// TailRetired: the event is a retired workflow's; the caller reloads
	// that workflow from its log once the tail is folded.
	TailRetired
)

// TailMark is what ApplyTail decided for the first event of the message
// it last met: a batch's later events follow it. The caller keeps one for
// the whole tail; its zero value is ready for use.
type TailMark struct {
	wf  string
	seq uint64
	had bool
}

// ApplyTail folds an event of the log after a snapshot's sequence into
// the state read from the snapshot, in the log's order. The snapshot's
// fleet record is as of that sequence, but each workflow's record may be
// later (it was written after, never in the middle of a message): an
// event of a message the record already has (its sequence at most the
// workflow's LastSeq as the record left it) is not folded again, though it is counted
// for the fleet as the live fold counted it. An event of a retired
// workflow is left to the caller (TailRetired), also counted for the
// fleet. So the state ends as a full replay of the log would.
func (s *State) ApplyTail(ev eventlog.Event, mark *TailMark) (TailOutcome, error) {
	if ev.WorkflowID != FleetID {
		if _, ok := s.retired[ev.WorkflowID]; ok {
			s.countFailure(ev)
			return TailRetired, nil
		}
		if w, ok := s.wfs[ev.WorkflowID]; ok {
			// A record holds whole messages: the events after the first
			// of a batch go where it went.
			had := ev.Seq <= w.LastSeq
			if ev.Index > 0 && mark.wf == ev.WorkflowID && mark.seq == ev.Seq {
				had = mark.had
			}
			*mark = TailMark{wf: ev.WorkflowID, seq: ev.Seq, had: had}
			if had {
				s.countFailure(ev)
				return TailHad, nil
			}
		}
	}
	return TailFolded, s.Apply(ev)
}
