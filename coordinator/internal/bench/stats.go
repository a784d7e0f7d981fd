package bench

import (
	"runtime"
	"slices"
	"sync/atomic"
	"time"
)

// samples collects a fixed number of durations from concurrent callers.
type samples struct {
	vals []time.Duration
	n    atomic.Int64
}

func newSamples(n int) *samples { return &samples{vals: make([]time.Duration, n)} }

// add records d and reports whether it was the last sample wanted.
// Samples beyond the capacity (redeliveries) are dropped.
func (s *samples) add(d time.Duration) bool {
	i := s.n.Add(1) - 1
	if i < int64(len(s.vals)) {
		s.vals[i] = d
	}
	return i == int64(len(s.vals))-1
}

// count is how many samples were recorded, up to the capacity.
func (s *samples) count() int { return int(min(s.n.Load(), int64(len(s.vals)))) }

// recorded returns the samples recorded so far.
func (s *samples) recorded() []time.Duration { return s.vals[:s.count()] }

// quantiles returns the nearest-rank p50 and p99 of ds in microseconds.
func quantiles(ds []time.Duration) (p50, p99 float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return micros(rank(sorted, 0.50)), micros(rank(sorted, 0.99))
}

// rank is the nearest-rank q-quantile of sorted values.
func rank(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// ratioTo is v over ref, or 0 when there is no reference figure (ref 0: the
// reference did not run, or measured nothing).
func ratioTo(v, ref float64) float64 {
	if ref <= 0 {
		return 0
	}
	return v / ref
}

// named returns the element of items that nameOf names name, or nil.
func named[T any](items []T, name string, nameOf func(*T) string) *T {
	for i := range items {
		if nameOf(&items[i]) == name {
			return &items[i]
		}
	}
	return nil
}

// memMeter measures the process's allocations and CPU time between start
// and stop.
type memMeter struct {
	before   runtime.MemStats
	cpu      time.Duration
	childCPU time.Duration
}

// startMem collects garbage and snapshots the allocation counters.
func startMem() *memMeter {
	m := &memMeter{}
	runtime.GC()
	runtime.ReadMemStats(&m.before)
	m.cpu, m.childCPU = cpuTime()
	return m
}

// stop returns what was allocated since start, per op of count. Each of
// settle runs after the CPU and allocations are read and before the live
// heap is: work the measurement put off until after its window (the
// watcher's reading of the log) so that the heap holds what it did before.
func (m *memMeter) stop(count int, settle ...func()) Memory {
	self, children := cpuTime()
	children -= m.childCPU
	cpu := self - m.cpu + children
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	mem := Memory{
		TotalAllocBytes: after.TotalAlloc - m.before.TotalAlloc,
		Mallocs:         after.Mallocs - m.before.Mallocs,
		CPUSeconds:      cpu.Seconds(),
		ChildCPUSeconds: children.Seconds(),
	}
	for _, f := range settle {
		f()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	mem.HeapDeltaBytes = int64(after.HeapAlloc) - int64(m.before.HeapAlloc)
	if count > 0 {
		mem.AllocBytesPerOp = float64(mem.TotalAllocBytes) / float64(count)
		mem.AllocsPerOp = float64(mem.Mallocs) / float64(count)
		mem.CPUPerOpMicros = micros(cpu) / float64(count)
	}
	return mem
}
