// Package gateregistry is the fleet's gate registry: gate definitions kept
// in the JetStream KV bucket protocol.BucketGates (key = gate name, value =
// the gate in wire form), validated by the one gate schema (shared/gates)
// before they are stored, and written compare-and-swap on the revision
// read. It is the fleet-wide user-level gate source, read afresh at every
// submission so every coordinator sees every change at once; edit.go
// parses and edits definitions for `coordinator gate add|update`.
package gateregistry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Errors the registry returns, matched with errors.Is.
var (
	// ErrUnavailable: the registry's bucket is not open here.
	ErrUnavailable = errors.New("gate registry unavailable")
	// ErrChanged: the gate changed in the registry since it was read.
	ErrChanged = errors.New("gate changed in the registry meanwhile")
)

// Entry is one registry gate and its revision in the bucket.
type Entry struct {
	Spec     protocol.GateSpec
	Revision uint64
}

// Registry reads and writes the registry bucket.
type Registry struct {
	kv  jetstream.KeyValue
	log *slog.Logger
}

// New returns the registry on kv; a nil kv (a fleet whose bucket does not
// exist) makes every call fail with ErrUnavailable.
func New(kv jetstream.KeyValue, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.Default()
	}
	return &Registry{kv: kv, log: log}
}

// DefinedAt is where a registry gate is defined, as gate sources report it.
func DefinedAt(name string) string { return protocol.BucketGates + "/" + name }

func (r *Registry) bucket() (jetstream.KeyValue, error) {
	if r.kv == nil {
		return nil, fmt.Errorf("%w: the key-value bucket %s is not open on this coordinator", ErrUnavailable, protocol.BucketGates)
	}
	return r.kv, nil
}

// Load reads every registry gate: one watch of the whole bucket, cheap
// enough for every submission. Entries that do not decode (written by
// hand) are skipped with a warning.
func (r *Registry) Load(ctx context.Context) (map[string]Entry, error) {
	kv, err := r.bucket()
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("gate registry: %w", err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]Entry{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gate registry: %w", ctx.Err())
		case ent, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("gate registry: watch closed")
			}
			if ent == nil {
				return out, nil // every current value has been delivered
			}
			if ent.Operation() != jetstream.KeyValuePut {
				delete(out, ent.Key())
				continue
			}
			var spec protocol.GateSpec
			if err := json.Unmarshal(ent.Value(), &spec); err != nil || spec.Name != ent.Key() || (len(spec.Command) == 0 && !spec.IsReview()) {
				r.log.Warn("ignoring an invalid gate registry entry", "bucket", protocol.BucketGates, "key", ent.Key(), "err", err)
				continue
			}
			out[ent.Key()] = Entry{Spec: spec, Revision: ent.Revision()}
		}
	}
}

// Gates returns the registry as a gate set, of the user origin (the
// registry is the fleet's user-level source).
func Gates(reg map[string]Entry) *gates.Set {
	s := &gates.Set{}
	for name, e := range reg {
		g := gates.FromSpec(e.Spec)
		g.Source = gates.Source{Origin: gates.OriginUser, File: DefinedAt(name)}
		s.Add(g)
	}
	return s
}

// Store writes a validated gate: an update of the revision read in reg (so
// concurrent changes conflict with ErrChanged rather than overwrite), or a
// create. It returns the new revision.
func (r *Registry) Store(ctx context.Context, spec protocol.GateSpec, reg map[string]Entry) (uint64, error) {
	kv, err := r.bucket()
	if err != nil {
		return 0, err
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return 0, err
	}
	var rev uint64
	if cur, ok := reg[spec.Name]; ok {
		rev, err = kv.Update(ctx, spec.Name, data, cur.Revision)
	} else {
		rev, err = kv.Create(ctx, spec.Name, data)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("gate %q: %w", spec.Name, ErrChanged)
	}
	if err != nil {
		return 0, fmt.Errorf("gate registry: store %s: %w", spec.Name, err)
	}
	return rev, nil
}

// Delete removes a gate if it is still at revision rev.
func (r *Registry) Delete(ctx context.Context, name string, rev uint64) error {
	kv, err := r.bucket()
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, name, jetstream.LastRevision(rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("gate %q: %w", name, ErrChanged)
		}
		return fmt.Errorf("gate registry: remove %s: %w", name, err)
	}
	return nil
}
