package bench

// The scale scenario (PERF-37): what the coordinator's state costs in
// memory with N nodes tracked (workflows in flight), and how the memory
// grows as finished workflows accumulate, with retirement (the default)
// and without it (the reference). The state is the coordinator's own fold
// (statemachine.State) of generated history, every event encoded and
// decoded as the log gives it back and numbered as the log numbers it,
// with the task prompts left in the log as the coordinator leaves them
// (PERF-50); no NATS server runs meanwhile, so the process's resident
// memory is the fold's plus the Go runtime's and the bench's own.

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// DefaultScaleNodes are the scale scenario's sizes by default;
// docs/performance.md has 1,000, 10,000 and 100,000.
var DefaultScaleNodes = []int{500, 2000}

// ScaleReport is the scale scenario's figures.
type ScaleReport struct {
	// Tracked are the points with N nodes in flight.
	Tracked []ScalePoint `json:"tracked"`
	// Growth are the points with N finished nodes accumulated, retired
	// after each workflow finishes and kept (the reference).
	Growth []GrowthPoint `json:"growth"`
}

// ScalePoint is the memory with Nodes nodes in flight.
type ScalePoint struct {
	Nodes     int `json:"nodes"`
	Workflows int `json:"workflows"`
	// HeapBytes is the live heap the state holds (after a collection,
	// less the heap before it was built); RSSBytes the process's resident
	// memory then (after returning free memory to the system).
	HeapBytes    int64   `json:"heap_bytes"`
	HeapPerNode  float64 `json:"heap_per_node"`
	RSSBytes     int64   `json:"rss_bytes"`
	FoldSeconds  float64 `json:"fold_seconds"`
	EventsFolded int     `json:"events_folded"`
}

// GrowthPoint is the memory after FinishedNodes nodes' workflows have
// finished, retired and kept.
type GrowthPoint struct {
	FinishedNodes int     `json:"finished_nodes"`
	RetiredHeap   int64   `json:"retired_heap_bytes"`
	RetiredRSS    int64   `json:"retired_rss_bytes"`
	KeptHeap      int64   `json:"kept_heap_bytes"`
	KeptRSS       int64   `json:"kept_rss_bytes"`
	RetiredPerWF  float64 `json:"retired_bytes_per_workflow"`
	KeptPerWF     float64 `json:"kept_bytes_per_workflow"`
	Workflows     int     `json:"workflows"`
	RetiredToKept float64 `json:"retired_to_kept"`
}

// liveHeap collects garbage and returns the live heap and the resident
// memory, after returning free memory to the system.
func liveHeap() (heap, rss int64) {
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc), residentBytes()
}

// historyLog numbers the events folded as the event log does, and gives
// back the task prompts of the history's submissions as the engine's
// reader of the log would: every generated workflow has the same tasks
// and prompts, and a state asks only for the events it recorded as
// submissions (or plan expansions, which the history has none of).
type historyLog struct {
	seq     uint64
	prompts map[string]string
}

// newHistoryLog is the log of a state given it as its prompt source.
func newHistoryLog(h *history, st *statemachine.State) *historyLog {
	l := &historyLog{prompts: map[string]string{}}
	for _, t := range h.spec.Tasks {
		l.prompts[t.ID] = t.Prompt
	}
	st.SetPromptSource(l, true)
	return l
}

// Prompt returns the history's prompt of task.
func (l *historyLog) Prompt(_ uint64, task string) (string, error) {
	p, ok := l.prompts[task]
	if !ok {
		return "", fmt.Errorf("the history has no task %s", task)
	}
	return p, nil
}

// foldWorkflow folds a workflow's events into st as the log gives them
// back, numbered by l.
func foldWorkflow(st *statemachine.State, l *historyLog, evs []eventlog.Event) error {
	for _, ev := range evs {
		data, err := eventlog.Encode(ev)
		if err != nil {
			return err
		}
		back, err := eventlog.Decode(data)
		if err != nil {
			return err
		}
		l.seq++
		back.Seq = l.seq
		if err := st.Apply(back); err != nil {
			return fmt.Errorf("fold %s of %s: %w", ev.Type(), ev.WorkflowID, err)
		}
	}
	return nil
}

// runScale measures every size of the scale scenario.
func (r *runner) runScale(ctx context.Context) (*ScaleReport, error) {
	rep := &ScaleReport{}
	for _, n := range r.cfg.ScaleNodes {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		p, err := r.scaleTracked(n)
		if err != nil {
			return nil, err
		}
		r.progress("%s: %d nodes in flight: %s of heap (%.0f B a node), %s resident", ScenarioScale, p.Nodes,
			byteSize(float64(p.HeapBytes)), p.HeapPerNode, byteSize(float64(p.RSSBytes)))
		rep.Tracked = append(rep.Tracked, p)
	}
	growth, err := r.scaleGrowth(ctx)
	if err != nil {
		return nil, err
	}
	rep.Growth = growth
	for _, g := range growth {
		r.progress("%s: %d finished nodes: %s of heap retiring, %s keeping them", ScenarioScale, g.FinishedNodes,
			byteSize(float64(g.RetiredHeap)), byteSize(float64(g.KeptHeap)))
	}
	return rep, nil
}

// scaleTracked folds workflows in flight until n nodes are tracked.
func (r *runner) scaleTracked(n int) (ScalePoint, error) {
	h, err := newHistory(time.Now())
	if err != nil {
		return ScalePoint{}, err
	}
	_, _ = liveHeap() // what earlier scenarios left is collected by now
	base, _ := liveHeap()
	st := statemachine.New()
	log := newHistoryLog(h, st)
	p := ScalePoint{}
	began := time.Now()
	var last string
	for p.Nodes < n {
		id, evs, err := h.next(inFlight)
		if err != nil {
			return p, err
		}
		last = id
		if err := foldWorkflow(st, log, evs); err != nil {
			return p, err
		}
		p.Workflows++
		p.Nodes += historyTasks
		p.EventsFolded += len(evs)
	}
	p.FoldSeconds = time.Since(began).Seconds()
	if err := promptsLeftOut(st, last); err != nil {
		return p, err
	}
	heap, rss := liveHeap()
	p.HeapBytes, p.RSSBytes = heap-base, rss
	p.HeapPerNode = float64(p.HeapBytes) / float64(p.Nodes)
	runtime.KeepAlive(st)
	return p, nil
}

// promptsLeftOut checks that workflow id of st holds no task prompt in
// memory and reads each back from the log, as the coordinator does.
func promptsLeftOut(st *statemachine.State, id string) error {
	w, ok := st.Workflow(id)
	if !ok {
		return fmt.Errorf("workflow %s not in memory", id)
	}
	for _, t := range w.Spec.Tasks {
		p, err := w.TaskPrompt(w.Nodes[t.ID])
		if t.Prompt != "" || err != nil || p != historyPrompt {
			return fmt.Errorf("task %s of %s: %d bytes of prompt in memory, %d read back (%v); want none and the history's",
				t.ID, id, len(t.Prompt), len(p), err)
		}
	}
	return nil
}

// scaleGrowth folds finished workflows up to the largest size, measuring
// at each size, retiring each workflow once it finishes and, the
// reference, keeping them all.
func (r *runner) scaleGrowth(ctx context.Context) ([]GrowthPoint, error) {
	out := make([]GrowthPoint, len(r.cfg.ScaleNodes))
	for _, retire := range []bool{true, false} {
		h, err := newHistory(time.Now())
		if err != nil {
			return nil, err
		}
		_, _ = liveHeap()
		base, _ := liveHeap()
		st := statemachine.New()
		log := newHistoryLog(h, st)
		nodes, wfs := 0, 0
		for i, n := range r.cfg.ScaleNodes {
			for nodes < n {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				id, evs, err := h.next(finished)
				if err != nil {
					return nil, err
				}
				if err := foldWorkflow(st, log, evs); err != nil {
					return nil, err
				}
				if retire && !st.Retire(id) {
					return nil, fmt.Errorf("workflow %s could not be retired", id)
				}
				nodes += historyTasks
				wfs++
			}
			heap, rss := liveHeap()
			g := &out[i]
			g.FinishedNodes, g.Workflows = nodes, wfs
			if retire {
				g.RetiredHeap, g.RetiredRSS = heap-base, rss
				g.RetiredPerWF = float64(g.RetiredHeap) / float64(wfs)
			} else {
				g.KeptHeap, g.KeptRSS = heap-base, rss
				g.KeptPerWF = float64(g.KeptHeap) / float64(wfs)
				g.RetiredToKept = ratioTo(float64(g.RetiredHeap), float64(g.KeptHeap))
			}
		}
		runtime.KeepAlive(st)
	}
	return out, nil
}
