package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// slotCollector reports runner slots, busy and free, per job kind: what
// every runner of this process (in `coordinator dev`, a worker and a gate
// runner) offers and uses.
type slotCollector struct {
	mu       sync.Mutex
	capacity map[string]int
	busy     map[string]int
	desc     *prometheus.Desc
}

var slots = &slotCollector{
	capacity: map[string]int{}, busy: map[string]int{},
	desc: prometheus.NewDesc(Namespace+"_runner_slots",
		"Job slots of this process's runners by kind (agent, gate) and state: busy (a job past its breakers is running) or free.",
		[]string{"kind", "state"}, nil),
}

// OpenSlots adds n slots of kind (a runner starting to pull jobs with
// concurrency n); the returned function takes them away again.
func OpenSlots(kind string, n int) (closeSlots func()) {
	slots.mu.Lock()
	slots.capacity[kind] += n
	slots.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			slots.mu.Lock()
			slots.capacity[kind] -= n
			slots.mu.Unlock()
		})
	}
}

// BusySlot marks one slot of kind busy; the returned function frees it.
func BusySlot(kind string) (free func()) {
	slots.mu.Lock()
	slots.busy[kind]++
	slots.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			slots.mu.Lock()
			slots.busy[kind]--
			slots.mu.Unlock()
		})
	}
}

// Describe implements prometheus.Collector.
func (c *slotCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *slotCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for kind, capacity := range c.capacity {
		if capacity <= 0 && c.busy[kind] <= 0 {
			continue
		}
		busy := c.busy[kind]
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(busy), kind, "busy")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(max(capacity-busy, 0)), kind, "free")
	}
}
