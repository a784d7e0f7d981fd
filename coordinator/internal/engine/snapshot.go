package engine

// Snapshots of the fold (PERF-30…PERF-32): the leader writes its state to
// the snapshots object store (protocol.BucketSnapshots) now and then and
// when it stops cleanly, each snapshot naming the event-log sequence it
// covers; on start it reads the newest valid one and folds only the events
// after that sequence. A snapshot is an object "fold/<sequence>" whose
// metadata carry its format version, the state types' fingerprint, the
// sequence, the event log's creation time, and the SHA-256 and size of its
// payload (the records of statemachine.SnapshotEncoder). One of another
// version or schema, of another event log, or whose payload does not
// match its checksum or does not decode is ignored, with a log line, and
// the next older one tried; with none, the whole log is folded.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// SnapshotVersion is the format version of the snapshots this coordinator
// writes and reads. It changes when what a snapshot means changes (the
// fold's rules); a change of the state's types changes its schema
// (statemachine.SnapshotSchema) by itself.
const SnapshotVersion = 1

// Snapshot object metadata keys.
const (
	metaVersion = "supervisor-snapshot-version"
	metaSchema  = "supervisor-snapshot-schema"
	metaSeq     = "supervisor-snapshot-seq"
	metaSHA256  = "supervisor-snapshot-sha256"
	metaSize    = "supervisor-snapshot-size"
	metaLog     = "supervisor-snapshot-log-created"
)

// snapshotPrefix begins every snapshot's object name.
const snapshotPrefix = "fold/"

// keepSnapshots is how many snapshots are kept: the newest and two older
// ones, should the newest be unreadable.
const keepSnapshots = 3

// DefaultSnapshotInterval is how often the leader writes a snapshot when
// the log has moved since the last one.
const DefaultSnapshotInterval = time.Minute

// DefaultSnapshotListWait is how long listing the snapshots may wait for
// the store's next record by default. A listing waits without end when
// the object store's watcher never gets its initial values, which happens
// when the store is empty and its last message cannot be looked up (as
// when its stream, just made on a cluster just formed, has no leader yet).
const DefaultSnapshotListWait = 10 * time.Second

// snapshotName is the object name of the snapshot covering seq.
func snapshotName(seq uint64) string { return fmt.Sprintf("%s%020d", snapshotPrefix, seq) }

// SnapshotInfo describes a snapshot written or read.
type SnapshotInfo struct {
	// Name is its object name, Seq the log sequence it covers.
	Name string
	Seq  uint64
	// Bytes is its payload's size; Workflows and Retired count its
	// records.
	Bytes     int64
	Workflows int
	Retired   int
}

// snapshotStore binds (creating) the snapshots object store.
func (e *Engine) snapshotStore(ctx context.Context) (jetstream.ObjectStore, error) {
	e.snapMu.Lock()
	defer e.snapMu.Unlock()
	if e.snaps != nil {
		return e.snaps, nil
	}
	os, err := e.bus.Snapshots(ctx)
	if err != nil {
		return nil, fmt.Errorf("engine: snapshots: %w", err)
	}
	e.snaps = os
	return os, nil
}

// logIdentity is the event log's creation time and first sequence: a
// snapshot of another log (one deleted and created again), or of this one
// before events were purged or aged out of it, is not applied to it, as
// the full replay would not have those events either.
func (e *Engine) logIdentity(ctx context.Context) (string, *jetstream.StreamInfo, error) {
	stream, err := e.bus.JS.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		return "", nil, fmt.Errorf("engine: event log: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("engine: event log: %w", err)
	}
	return fmt.Sprintf("%s first %d", info.Created.UTC().Format(time.RFC3339Nano), info.State.FirstSeq), info, nil
}

// WriteSnapshot writes a snapshot of the state now, unless the newest one
// already covers the log's position, and deletes the snapshots older than
// the last keepSnapshots. The state is read workflow by workflow: appends
// wait only while the snapshot's sequence and the listing are taken.
func (e *Engine) WriteSnapshot(ctx context.Context) (SnapshotInfo, error) {
	e.snapWrite.Lock()
	defer e.snapWrite.Unlock()
	store, err := e.snapshotStore(ctx)
	if err != nil {
		return SnapshotInfo{}, err
	}
	logID, _, err := e.logIdentity(ctx)
	if err != nil {
		return SnapshotInfo{}, err
	}

	// The sequence: with no append in flight, every event up to the
	// highest folded is in the state.
	var (
		seq     uint64
		fleet   statemachine.Fleet
		listing []statemachine.Entry
	)
	e.appendGate.Lock()
	e.Read(func(s *statemachine.State) {
		fleet = *s.Fleet()
		fleet.Failures = append([]time.Time(nil), fleet.Failures...)
		listing = s.Listing()
		seq = fleet.LastSeq
		for _, en := range listing {
			if en.Workflow != nil {
				seq = max(seq, en.Workflow.LastSeq)
			} else {
				seq = max(seq, en.Retired.LastSeq)
			}
		}
	})
	e.appendGate.Unlock()
	info := SnapshotInfo{Name: snapshotName(seq), Seq: seq}
	if seq == 0 || seq == e.snapSeq.Load() {
		return info, nil // nothing new
	}

	f, err := os.CreateTemp(e.opts.DataDir, "snapshot-*")
	if err != nil {
		return info, fmt.Errorf("engine: write snapshot: %w", err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	sum := sha256.New()
	enc := statemachine.NewSnapshotEncoder(io.MultiWriter(f, sum))
	if err := enc.Fleet(&fleet); err != nil {
		return info, err
	}
	for _, en := range listing {
		if en.Retired != nil {
			info.Retired++
			e.Read(func(*statemachine.State) { err = enc.Retired(en.Retired) })
		} else {
			// As it is now, which may be later than seq (ApplyTail knows),
			// or retired since.
			e.Read(func(s *statemachine.State) {
				id := en.Workflow.ID
				if w, ok := s.Workflow(id); ok {
					info.Workflows++
					err = enc.Workflow(w)
				} else if r, ok := s.Retired(id); ok {
					info.Retired++
					err = enc.Retired(r)
				} else {
					err = fmt.Errorf("engine: write snapshot: workflow %s is gone from the state", id)
				}
			})
		}
		if err != nil {
			return info, err
		}
	}
	if err := enc.Close(); err != nil {
		return info, err
	}
	if info.Bytes, err = f.Seek(0, io.SeekCurrent); err != nil {
		return info, fmt.Errorf("engine: write snapshot: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return info, fmt.Errorf("engine: write snapshot: %w", err)
	}
	meta := jetstream.ObjectMeta{Name: info.Name, Description: "the coordinator's fold of the event log up to sequence " + strconv.FormatUint(seq, 10),
		Metadata: map[string]string{
			metaVersion: strconv.Itoa(SnapshotVersion), metaSchema: statemachine.SnapshotSchema,
			metaSeq: strconv.FormatUint(seq, 10), metaSHA256: hex.EncodeToString(sum.Sum(nil)),
			metaSize: strconv.FormatInt(info.Bytes, 10), metaLog: logID,
		}}
	if _, err := store.Put(ctx, meta, f); err != nil {
		return info, fmt.Errorf("engine: store snapshot %s: %w", info.Name, err)
	}
	e.snapSeq.Store(seq)
	e.pruneSnapshots(ctx, store)
	return info, nil
}

// snapshotsNewestFirst lists the snapshots, the newest first. It fails
// when the store gives neither a record nor the end of its records for
// wait: a listing that goes on delivering is never cut short.
func snapshotsNewestFirst(ctx context.Context, store jetstream.ObjectStore, wait time.Duration) ([]*jetstream.ObjectInfo, error) {
	return listSnapshots(ctx, store, wait, false)
}

// listSnapshots is snapshotsNewestFirst, with deleted snapshots' records
// too when withDeleted.
func listSnapshots(ctx context.Context, store jetstream.ObjectStore, wait time.Duration, withDeleted bool) ([]*jetstream.ObjectInfo, error) {
	var opts []jetstream.WatchOpt
	if !withDeleted {
		opts = append(opts, jetstream.IgnoreDeletes())
	}
	w, err := store.Watch(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("engine: list snapshots: %w", err)
	}
	updates := w.Updates()
	idle := time.NewTimer(wait)
	defer idle.Stop()
	var out []*jetstream.ObjectInfo
	for {
		select {
		case o, ok := <-updates:
			if !ok { // the connection's end
				return nil, errors.New("engine: list snapshots: the store's watcher ended")
			}
			if o == nil { // every record delivered
				_ = w.Stop()
				sort.Slice(out, func(i, j int) bool { return out[i].Name > out[j].Name })
				return out, nil
			}
			if (withDeleted || !o.Deleted) && strings.HasPrefix(o.Name, snapshotPrefix) {
				out = append(out, o)
			}
			idle.Reset(wait)
			continue
		case <-idle.C:
			err = fmt.Errorf("the %s store gave nothing for %s", protocol.BucketSnapshots, wait)
		case <-ctx.Done():
			err = ctx.Err()
		}
		// Given up: stop the watcher and take what it still delivers, so
		// that its delivery, blocked on the full channel, ends.
		_ = w.Stop()
		go func() {
			for range updates { //nolint:revive // drained only
			}
		}()
		return nil, fmt.Errorf("engine: list snapshots: %w", err)
	}
}

// pruneSnapshots deletes all but the newest keepSnapshots snapshots, and
// the records the store keeps of deleted ones.
func (e *Engine) pruneSnapshots(ctx context.Context, store jetstream.ObjectStore) {
	list, err := listSnapshots(ctx, store, e.opts.SnapshotListWait, true)
	if err != nil {
		e.log.Warn("cannot list snapshots to delete old ones", "err", err)
		return
	}
	var stream jetstream.Stream // the store's, looked up once a record is to be purged
	kept := 0
	for _, o := range list {
		if !o.Deleted {
			if kept++; kept <= keepSnapshots {
				continue
			}
			if err := store.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				e.log.Warn("cannot delete an old snapshot", "snapshot", o.Name, "err", err)
				continue
			}
		}
		if stream == nil {
			if stream, err = e.bus.JS.Stream(ctx, "OBJ_"+protocol.BucketSnapshots); err != nil {
				e.log.Warn("cannot remove deleted snapshots' records", "err", err)
				return
			}
		}
		if err := purgeDeletedRecord(ctx, stream, o.Name); err != nil {
			e.log.Warn("cannot remove a deleted snapshot's record", "snapshot", o.Name, "err", err)
		}
	}
}

// purgeDeletedRecord removes from stream, the snapshots store's, the
// record the object store keeps of deleted object name: a marker on its
// metadata subject ($O.<bucket>.M.<name in URL-safe base64>, as the
// object store's specification lays them out), which every later listing
// would otherwise deliver, one a snapshot ever deleted. It is called,
// under snapWrite, for objects the listing showed deleted only: their
// content is gone already, and no snapshot is written meanwhile under
// their name.
func purgeDeletedRecord(ctx context.Context, stream jetstream.Stream, name string) error {
	subject := fmt.Sprintf("$O.%s.M.%s", protocol.BucketSnapshots, base64.URLEncoding.EncodeToString([]byte(name)))
	return stream.Purge(ctx, jetstream.WithPurgeSubject(subject))
}

// loadSnapshot reads the newest valid snapshot; nil when there is none.
func (e *Engine) loadSnapshot(ctx context.Context) (*statemachine.State, SnapshotInfo, error) {
	store, err := e.snapshotStore(ctx)
	if err != nil {
		return nil, SnapshotInfo{}, err
	}
	list, err := snapshotsNewestFirst(ctx, store, e.opts.SnapshotListWait)
	if err != nil || len(list) == 0 {
		return nil, SnapshotInfo{}, err
	}
	logID, info, err := e.logIdentity(ctx)
	if err != nil {
		return nil, SnapshotInfo{}, err
	}
	for _, o := range list {
		st, si, why := e.readSnapshot(ctx, store, o, logID, info.State.LastSeq)
		if why != "" {
			if ctx.Err() != nil {
				return nil, SnapshotInfo{}, ctx.Err()
			}
			e.log.Warn("snapshot ignored", "snapshot", o.Name, "why", why)
			continue
		}
		return st, si, nil
	}
	e.log.Warn("no snapshot could be used; folding the whole event log", "snapshots", len(list))
	return nil, SnapshotInfo{}, nil
}

// readSnapshot reads one snapshot, or says why it cannot be used.
func (e *Engine) readSnapshot(ctx context.Context, store jetstream.ObjectStore, o *jetstream.ObjectInfo,
	logID string, lastSeq uint64) (*statemachine.State, SnapshotInfo, string) {
	md := o.Metadata
	switch v := md[metaVersion]; {
	case v != strconv.Itoa(SnapshotVersion):
		return nil, SnapshotInfo{}, fmt.Sprintf("format version %q; this coordinator reads version %d", v, SnapshotVersion)
	case md[metaSchema] != statemachine.SnapshotSchema:
		return nil, SnapshotInfo{}, fmt.Sprintf("written for other state types (schema %s; this coordinator's is %s)",
			md[metaSchema], statemachine.SnapshotSchema)
	case md[metaLog] != logID:
		return nil, SnapshotInfo{}, fmt.Sprintf("taken of another event log, or before events were removed from it (log %s; now %s)",
			md[metaLog], logID)
	}
	seq, err := strconv.ParseUint(md[metaSeq], 10, 64)
	if err != nil || seq == 0 {
		return nil, SnapshotInfo{}, fmt.Sprintf("no valid sequence (%q)", md[metaSeq])
	}
	if seq > lastSeq {
		return nil, SnapshotInfo{}, fmt.Sprintf("covers sequence %d, past the log's last %d", seq, lastSeq)
	}
	size, err := strconv.ParseInt(md[metaSize], 10, 64)
	if err != nil || size < 0 {
		return nil, SnapshotInfo{}, fmt.Sprintf("no valid size (%q)", md[metaSize])
	}
	f, err := os.CreateTemp(e.opts.DataDir, "snapshot-*")
	if err != nil {
		return nil, SnapshotInfo{}, fmt.Sprintf("cannot make a temporary file: %v", err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	sum := sha256.New()
	n, err := copyObject(ctx, store, o.Name, io.MultiWriter(f, sum))
	if err != nil {
		return nil, SnapshotInfo{}, fmt.Sprintf("cannot read it: %v", err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); n != size || got != md[metaSHA256] {
		return nil, SnapshotInfo{}, fmt.Sprintf("corrupt: %d bytes of SHA-256 %s, want %d bytes of %s", n, got, size, md[metaSHA256])
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, SnapshotInfo{}, fmt.Sprintf("cannot read it back: %v", err)
	}
	st, err := statemachine.DecodeSnapshot(f, size)
	if err != nil {
		return nil, SnapshotInfo{}, fmt.Sprintf("does not decode: %v", err)
	}
	return st, SnapshotInfo{Name: o.Name, Seq: seq, Bytes: size, Workflows: st.Len(), Retired: st.RetiredLen()}, ""
}

// copyObject copies object name to w.
func copyObject(ctx context.Context, store jetstream.ObjectStore, name string, w io.Writer) (int64, error) {
	r, err := store.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	return io.Copy(w, r)
}

// restore rebuilds the state from the newest valid snapshot and the
// events after it; with none, from the whole log. It returns the state,
// the events folded and the snapshot used (Seq 0: none).
func (e *Engine) restore(ctx context.Context) (*statemachine.State, int, SnapshotInfo, error) {
	var (
		st  *statemachine.State
		si  SnapshotInfo
		err error
	)
	if e.opts.SnapshotInterval > 0 {
		st, si, err = e.loadSnapshot(ctx)
		if err != nil {
			e.log.Warn("cannot read snapshots; folding the whole event log", "err", err)
		}
	}
	if st == nil {
		st, count, err := e.fold(ctx, protocol.SubjectEvents)
		return st, count, SnapshotInfo{}, err
	}
	st.SetPromptSource(e.prompts, e.leavePrompts)
	e.snapSeq.Store(si.Seq)
	reload := map[string]bool{}
	var mark statemachine.TailMark
	count, err := e.foldLog(ctx, protocol.SubjectEvents, si.Seq+1, st, func(ev eventlog.Event) error {
		out, err := st.ApplyTail(ev, &mark)
		if out == statemachine.TailRetired {
			reload[ev.WorkflowID] = true
		}
		return err
	})
	if err != nil {
		return nil, 0, si, err
	}
	for wf := range reload {
		one, _, err := e.fold(ctx, protocol.EventSubject(wf))
		if err != nil {
			return nil, 0, si, err
		}
		if w, ok := one.Workflow(wf); ok {
			st.Put(w)
		}
	}
	return st, count, si, nil
}
