package metrics

import (
	"context"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/supervisorhq/supervisor/shared/state"
)

// CoordinatorSnapshot is what a coordinator reports at scrape time.
type CoordinatorSnapshot struct {
	// Leader is true while this coordinator leads (only the leader holds
	// the workflows' state; a standby reports none).
	Leader bool
	// Workflows counts workflows by status.
	Workflows map[string]int
	// Inbox counts nodes waiting for a human, by node status (escalated,
	// awaiting_approval).
	Inbox map[string]int
	// Breakers is every circuit breaker on record.
	Breakers []state.ScopedBreaker
}

// CoordinatorSource answers a scrape for a coordinator.
type CoordinatorSource interface {
	MetricsSnapshot(ctx context.Context) (CoordinatorSnapshot, error)
}

type coordCollector struct {
	mu sync.Mutex
	// src is the current source, boxed so that unsetting compares
	// pointers (a source's dynamic type need not be comparable).
	src *CoordinatorSource

	leader, workflows, inbox, breaker, failures *prometheus.Desc
}

var coordinatorCollector = &coordCollector{
	leader: prometheus.NewDesc(Namespace+"_coordinator_leader",
		"1 while this coordinator leads the fleet, 0 while it stands by.", nil, nil),
	workflows: prometheus.NewDesc(Namespace+"_workflows",
		"Workflows known to the leading coordinator, by status.", []string{"status"}, nil),
	inbox: prometheus.NewDesc(Namespace+"_inbox_size",
		"Nodes waiting for a human (the inbox), by node status.", []string{"status"}, nil),
	breaker: prometheus.NewDesc(Namespace+"_breaker_state",
		"Circuit breakers on record: 1 for the state each scope is in, 0 for the others.", []string{"scope", "state"}, nil),
	failures: prometheus.NewDesc(Namespace+"_breaker_failures",
		"Failures inside the current window of each circuit breaker on record.", []string{"scope"}, nil),
}

// breakerStates are the states the breaker_state metric enumerates.
var breakerStates = []state.BreakerState{state.BreakerClosed, state.BreakerOpen, state.BreakerHalfOpen}

// SetCoordinator makes this process report src's snapshot at each scrape
// (coordinator serve and dev). The returned function stops it, unless
// another source was set since.
func SetCoordinator(src CoordinatorSource) (unset func()) {
	box := &src
	coordinatorCollector.mu.Lock()
	coordinatorCollector.src = box
	coordinatorCollector.mu.Unlock()
	return func() {
		coordinatorCollector.mu.Lock()
		if coordinatorCollector.src == box {
			coordinatorCollector.src = nil
		}
		coordinatorCollector.mu.Unlock()
	}
}

// Describe implements prometheus.Collector.
func (c *coordCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.leader
	ch <- c.workflows
	ch <- c.inbox
	ch <- c.breaker
	ch <- c.failures
}

// Collect implements prometheus.Collector.
func (c *coordCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	box := c.src
	c.mu.Unlock()
	if box == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	snap, err := (*box).MetricsSnapshot(ctx)
	leader := 0.0
	if snap.Leader {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leader)
	for _, status := range sortedKeys(snap.Workflows) {
		ch <- prometheus.MustNewConstMetric(c.workflows, prometheus.GaugeValue, float64(snap.Workflows[status]), status)
	}
	for _, status := range sortedKeys(snap.Inbox) {
		ch <- prometheus.MustNewConstMetric(c.inbox, prometheus.GaugeValue, float64(snap.Inbox[status]), status)
	}
	seen := map[string]bool{}
	for _, b := range snap.Breakers {
		scope := Bounded("scope", b.Scope)
		if seen[scope] {
			continue // past the cap, several scopes are "other": report the first
		}
		seen[scope] = true
		for _, s := range breakerStates {
			v := 0.0
			if b.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, v, scope, string(s))
		}
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, float64(len(b.FailureTimes)), scope)
	}
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.breaker, err)
	}
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
