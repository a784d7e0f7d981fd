package jobrun

// Circuit breakers in the job lifecycle. Before a runner takes a job's
// lease it asks the breakers of the job's scopes (what it runs, and its
// repository) whether the job may run; after the work it tells them how
// the job went. The breakers live in the state store, so the whole fleet
// shares them.
//
// A job an open breaker refuses waits on the runner that holds it
// (bus.Delivery.Park): its slot goes to other jobs, heartbeats keep the
// message in progress, and after the breaker's cool-down (asked again at
// least every MaxBreakerWait, so a reset takes effect soon) it runs. It is
// not handed back with a Nak: JetStream counts every redelivery against
// MaxDeliver, and a job redelivered every 30 s through a 300 s cool-down
// would be dead-lettered before the breaker ever closed. Waiting thus
// spends no delivery and no attempt, and counts as no failure. The runner
// tells the coordinator (a waiting report), which shows it on the node.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
)

// MaxBreakerWait bounds one wait on a refusing breaker before the runner
// asks again: a breaker reset, or a probe that closed it, lets the job run
// within this time.
const MaxBreakerWait = 30 * time.Second

// breakerSlotWait is how long a job whose wait is over may wait for a slot
// of its runner before it is handed to the fleet (a Nak, which spends a
// delivery, unless the next delivery would be its last).
const breakerSlotWait = 10 * time.Second

// minBreakerWait keeps a runner from asking a breaker in a tight loop.
const minBreakerWait = 200 * time.Millisecond

// JobScopes are a job's circuit-breaker scopes; "" leaves one out.
type JobScopes struct {
	// Work is the scope of what the job runs: its agent's command
	// (protocol.AgentScope) or its gate (protocol.GateScope).
	Work string
	// Repo is its repository's (protocol.RepoScope).
	Repo string
}

func (s JobScopes) list() []string {
	var out []string
	for _, sc := range []string{s.Work, s.Repo} {
		if sc != "" {
			out = append(out, sc)
		}
	}
	return out
}

// Verdict is how a job's outcome counts for one of its breakers.
type Verdict int

const (
	// Unjudged: the outcome says nothing about the scope (the work did not
	// get that far, or the runner's own infrastructure failed); nothing is
	// reported.
	Unjudged Verdict = iota
	// Worked: the scope's part of the job worked, a success for its
	// breaker (which closes a half-open one).
	Worked
	// Broke: the scope's part of the job failed, a failure for its breaker.
	Broke
)

// refusal is a breaker's refusal to let a job run.
type refusal struct {
	scope string
	state.Decision
}

// awaitBreakers holds the job until every breaker of its scopes lets it
// through. ok means run it now; otherwise disp says what to do with the
// message (the runner is stopping, the workflow ended meanwhile, or no
// slot came free in time).
func awaitBreakers(ctx context.Context, deps Deps, d *bus.Delivery, m Meta, log *slog.Logger) (disp bus.Disposition, ok bool) {
	scopes := m.Scopes.list()
	if len(scopes) == 0 {
		return bus.Disposition{}, true
	}
	told := ""
	for {
		r := allowAll(ctx, deps.Store, scopes, deps.Breakers, log)
		if r == nil {
			return bus.Disposition{}, true
		}
		if key := fmt.Sprintf("%s@%d", r.scope, r.RetryAt.UnixNano()); key != told {
			told = key
			log.InfoContext(ctx, "circuit breaker refuses the job; it waits without spending a delivery",
				"scope", r.scope, "state", r.State, "until", r.RetryAt)
			reportWaiting(ctx, deps, d, m, r, log)
		}
		wait := min(max(time.Until(r.RetryAt), minBreakerWait), MaxBreakerWait)
		grace := breakerSlotWait
		if d.MaxDeliver > 0 && d.Number+1 >= uint64(d.MaxDeliver) {
			grace = 0 // a hand-back would leave it one delivery: wait for a slot here
		}
		switch err := d.Park(ctx, wait, grace); {
		case errors.Is(err, bus.ErrNoSlot):
			log.InfoContext(ctx, "breaker wait over but this runner is busy; handing the job to the fleet", "scope", r.scope)
			return bus.Nak(0), false
		case errors.Is(err, bus.ErrStopping):
			log.InfoContext(ctx, "stopping while the job waits on a breaker; handing it back", "scope", r.scope)
			return bus.Nak(min(max(time.Until(r.RetryAt), 0), MaxBreakerWait)), false
		case err != nil:
			return bus.Nak(0), false
		}
		if disp, done := finished(ctx, deps, m, log); done {
			return disp, false
		}
	}
}

// allowAll asks every scope's breaker and returns the refusal that binds
// longest, or nil when all of them let the job through. It first looks
// without changing anything, so that a probe of one scope is not handed
// out to a job another scope holds back; only a scope whose look says the
// job would be its probe is asked for real (a closed breaker's answer
// changes nothing, so one read per closed scope is all a job costs). A
// breaker the store cannot answer for lets the job through: the lease,
// taken next, stops it if the store is down.
func allowAll(ctx context.Context, store state.Store, scopes []string, p state.BreakerPolicy, log *slog.Logger) *refusal {
	var worst *refusal
	var probes []string
	now := p.CurrentTime()
	for _, sc := range scopes {
		b, err := store.BreakerGet(ctx, sc)
		if err != nil {
			log.WarnContext(ctx, "cannot read a circuit breaker; not holding the job back", "scope", sc, "err", err)
			continue
		}
		switch _, d := b.Allow(now, p); {
		case !d.Allowed:
			worst = later(worst, &refusal{scope: sc, Decision: d})
		case d.Probe:
			probes = append(probes, sc)
		}
	}
	if worst != nil {
		return worst
	}
	for _, sc := range probes {
		d, err := store.BreakerAllow(ctx, sc, p)
		if err != nil {
			log.WarnContext(ctx, "cannot ask a circuit breaker; not holding the job back", "scope", sc, "err", err)
			continue
		}
		if d.Probe {
			log.InfoContext(ctx, "circuit breaker half-open: this job is its probe", "scope", sc)
		}
		if !d.Allowed {
			// Another runner took the probe since the look. A probe this job
			// took of an earlier scope goes unanswered and is handed out
			// again after the cool-down.
			return &refusal{scope: sc, Decision: d}
		}
	}
	return nil
}

func later(a, b *refusal) *refusal {
	if a == nil || b.RetryAt.After(a.RetryAt) {
		return b
	}
	return a
}

// reportWaiting tells the coordinator the job waits on a breaker. It is
// news only, so a failure to send it is logged and the job waits anyway.
func reportWaiting(ctx context.Context, deps Deps, d *bus.Delivery, m Meta, r *refusal, log *slog.Logger) {
	w := &protocol.Waiting{Kind: m.Kind, JobID: m.JobID, WorkflowID: m.WorkflowID, NodeID: m.NodeID, Gate: m.Gate,
		Attempt: m.Attempt, Round: m.Round, Scope: r.scope, State: string(r.State), Until: r.RetryAt.UTC(),
		Host: deps.Host, Delivery: d.Number, At: time.Now().UTC()}
	id := fmt.Sprintf("%s.waiting.%s.%d", m.JobID, r.scope, r.RetryAt.UnixNano())
	if err := deps.Bus.PublishReport(ctx, &protocol.Report{Type: protocol.ReportWaiting, Waiting: w}, id); err != nil {
		log.WarnContext(ctx, "cannot report the breaker wait", "scope", r.scope, "err", err)
	}
}

// reportBreakers tells the job's breakers how it went. A failure to reach
// the store is logged: the job's own outcome stands. ctx is the job's
// (its span); its cancellation does not stop the reports.
func reportBreakers(ctx context.Context, deps Deps, m Meta, out Outcome, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, v := range []struct {
		scope   string
		verdict Verdict
	}{{m.Scopes.Work, out.Work}, {m.Scopes.Repo, out.Repo}} {
		if v.scope == "" || v.verdict == Unjudged {
			continue
		}
		b, err := deps.Store.BreakerReport(ctx, v.scope, deps.Breakers, v.verdict == Worked)
		switch {
		case err != nil:
			log.WarnContext(ctx, "cannot report to a circuit breaker", "scope", v.scope, "err", err)
		case v.verdict == Broke && b.State == state.BreakerOpen:
			log.WarnContext(ctx, "circuit breaker open: the fleet holds this scope's jobs back", "scope", v.scope,
				"opened_at", b.OpenedAt)
		}
	}
}
