package jobrun

// Presence: a runner announces itself in the fleet's runners bucket
// (protocol.BucketRunners) so the coordinator's fleet API can list what
// runs where. The entry is renewed every protocol.RunnerAnnounceInterval
// and at once when a job starts or ends; the bucket's TTL removes it when
// a runner dies without saying goodbye, and a clean shutdown deletes it.

import (
	"context"
	"encoding/json"
	"log/slog"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// presenceTimeout bounds one write to the runners bucket.
const presenceTimeout = 5 * time.Second

// Presence announces a runner's RunnerInfo, one entry per job kind it
// serves (coordinator dev runs a worker and a gate runner on one Deps).
// A nil *Presence does nothing, so Deps built without one (tests) work.
type Presence struct {
	kv       jetstream.KeyValue
	host     string
	labels   map[string]string
	sandbox  string
	off      []string // protections of the process sandbox that are off
	version  string
	interval time.Duration
	log      *slog.Logger

	mu    sync.Mutex
	kinds map[protocol.JobKind]*announced
}

// announced is one kind's entry and what renews it.
type announced struct {
	info protocol.RunnerInfo
	kick chan struct{}
}

// NewPresence returns the presence of runner host in kv (nil kv: a
// Presence that announces nothing, as for a fleet whose coordinator
// predates the bucket). sandbox names the runner's sandbox.
func NewPresence(kv jetstream.KeyValue, host string, labels map[string]string, sandbox string, log *slog.Logger) *Presence {
	if log == nil {
		log = slog.Default()
	}
	return &Presence{kv: kv, host: host, labels: labels, sandbox: sandbox, version: BinaryVersion(),
		interval: protocol.RunnerAnnounceInterval, log: log, kinds: map[protocol.JobKind]*announced{}}
}

// SetSandboxOff records the process sandbox's protections that are off, for
// the entries Announce puts afterwards.
func (p *Presence) SetSandboxOff(off []string) {
	if p != nil {
		p.off = slices.Clone(off)
	}
}

// SetInterval changes how often the entries are renewed (tests; the
// default is protocol.RunnerAnnounceInterval). Call it before Announce.
func (p *Presence) SetInterval(d time.Duration) {
	if p != nil && d > 0 {
		p.interval = d
	}
}

// Announce puts the runner's entry for kind (pools, slots) in the bucket
// now and every interval until the returned stop is called; stop deletes
// the entry (a clean shutdown) and returns once it is gone.
func (p *Presence) Announce(kind protocol.JobKind, pools []string, slots int) (stop func()) {
	if p == nil || p.kv == nil {
		return func() {}
	}
	now := time.Now().UTC()
	a := &announced{kick: make(chan struct{}, 1), info: protocol.RunnerInfo{
		Kind: kind, Host: p.host, Pools: slices.Clone(pools), Labels: p.labels, Sandbox: p.sandbox, SandboxOff: p.off,
		Version: p.version, Slots: max(slots, 1), StartedAt: now,
	}}
	p.mu.Lock()
	p.kinds[kind] = a
	p.mu.Unlock()

	key := protocol.RunnerKey(kind, p.host)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(p.interval)
		defer t.Stop()
		failing := false
		for {
			err := p.put(ctx, kind, key)
			switch {
			case err != nil && ctx.Err() == nil && !failing:
				p.log.Warn("presence: cannot announce this runner in the runners bucket", "key", key, "err", err)
				failing = true
			case err == nil && failing:
				p.log.Info("presence: announcing this runner again", "key", key)
				failing = false
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-a.kick:
			}
		}
	}()
	return func() {
		cancel()
		<-done
		p.mu.Lock()
		delete(p.kinds, kind)
		p.mu.Unlock()
		dctx, dcancel := context.WithTimeout(context.Background(), presenceTimeout)
		defer dcancel()
		if err := p.kv.Delete(dctx, key); err != nil {
			p.log.Warn("presence: cannot remove this runner from the runners bucket (its entry expires on its own)",
				"key", key, "err", err)
		}
	}
}

// put writes kind's entry, stamped now.
func (p *Presence) put(ctx context.Context, kind protocol.JobKind, key string) error {
	p.mu.Lock()
	a, ok := p.kinds[kind]
	if !ok {
		p.mu.Unlock()
		return nil
	}
	a.info.SeenAt = time.Now().UTC()
	data, err := json.Marshal(a.info)
	p.mu.Unlock()
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, presenceTimeout)
	defer cancel()
	_, err = p.kv.Put(pctx, key, data)
	return err
}

// update changes kind's entry with fn and, if it changed, renews it at
// once.
func (p *Presence) update(kind protocol.JobKind, fn func(*protocol.RunnerInfo) bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.kinds[kind]
	if !ok || !fn(&a.info) {
		return
	}
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// jobStarted adds a job to the runner's current jobs.
func (p *Presence) jobStarted(m Meta, at time.Time) {
	p.update(m.Kind, func(info *protocol.RunnerInfo) bool {
		info.Jobs = append(info.Jobs, protocol.RunnerJob{JobID: m.JobID, WorkflowID: m.WorkflowID, NodeID: m.NodeID,
			Attempt: m.Attempt, Gate: m.Gate, StartedAt: at})
		sort.Slice(info.Jobs, func(i, j int) bool { return info.Jobs[i].StartedAt.Before(info.Jobs[j].StartedAt) })
		info.Busy = len(info.Jobs)
		return true
	})
}

// jobEnded removes a job from the runner's current jobs and counts the
// result it reported (nil: none, the job was handed back or dropped).
func (p *Presence) jobEnded(m Meta, reported *protocol.Report) {
	p.update(m.Kind, func(info *protocol.RunnerInfo) bool {
		info.Jobs = slices.DeleteFunc(info.Jobs, func(j protocol.RunnerJob) bool { return j.JobID == m.JobID })
		info.Busy = len(info.Jobs)
		switch ResultTally(reported) {
		case TallySucceeded:
			info.Stats.Succeeded++
		case TallyFailed:
			info.Stats.Failed++
		}
		return true
	})
}

// CacheLookup counts one gate cache lookup of a gate runner: a hit, or a
// miss (the gate ran).
func (p *Presence) CacheLookup(hit bool) {
	p.update(protocol.KindGate, func(info *protocol.RunnerInfo) bool {
		if hit {
			info.Stats.CacheHits++
		} else {
			info.Stats.CacheMisses++
		}
		return false // counted at the next renewal, which the job's end brings
	})
}

// Info returns a copy of the runner's entry for kind as it stands, and
// whether it announces one.
func (p *Presence) Info(kind protocol.JobKind) (protocol.RunnerInfo, bool) {
	if p == nil {
		return protocol.RunnerInfo{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.kinds[kind]
	if !ok {
		return protocol.RunnerInfo{}, false
	}
	info := a.info
	info.Jobs = slices.Clone(a.info.Jobs)
	return info, true
}

// Tally is how a reported result counts in a runner's stats.
type Tally int

// Outcomes of a reported result.
const (
	// TallyNone: no result, or one that is neither (a pending or
	// skipped gate).
	TallyNone Tally = iota
	// TallySucceeded: an agent that succeeded, a gate that passed.
	TallySucceeded
	// TallyFailed: any other agent or gate result (failed, timeout,
	// error, …).
	TallyFailed
)

// ResultTally says how a reported result counts in a runner's stats.
func ResultTally(r *protocol.Report) Tally {
	switch {
	case r == nil:
		return TallyNone
	case r.Agent != nil:
		if r.Agent.Status == protocol.AgentSucceeded {
			return TallySucceeded
		}
		return TallyFailed
	case r.Gate != nil:
		switch r.Gate.Status {
		case protocol.GatePassed:
			return TallySucceeded
		case protocol.GatePending, protocol.GateSkipped:
			return TallyNone
		}
		return TallyFailed
	}
	return TallyNone
}

// BinaryVersion is the running binary's version: its module version when
// it has one, else the VCS revision it was built from (with "+dirty" for
// uncommitted changes), else "devel".
func BinaryVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return rev[:min(12, len(rev))] + dirty
}
