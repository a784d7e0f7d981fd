package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// validateHistory checks the replay and scale scenarios' sizes.
func (c *Config) validateHistory(want map[string]bool) []error {
	var errs []error
	if want[ScenarioReplay] {
		if len(c.ReplayEvents) == 0 {
			errs = append(errs, fmt.Errorf("replay needs at least one log size (--replay-events)"))
		}
		for _, n := range c.ReplayEvents {
			if n < 100 {
				errs = append(errs, fmt.Errorf("replay log sizes must be at least 100 events, got %d", n))
			}
		}
	}
	if want[ScenarioScale] {
		if len(c.ScaleNodes) == 0 {
			errs = append(errs, fmt.Errorf("scale needs at least one node count (--scale-nodes)"))
		}
		if !slices.IsSorted(c.ScaleNodes) {
			errs = append(errs, fmt.Errorf("scale node counts must increase, got %v", c.ScaleNodes))
		}
		for _, n := range c.ScaleNodes {
			if n < historyTasks {
				errs = append(errs, fmt.Errorf("scale node counts must be at least %d (one workflow), got %d", historyTasks, n))
			}
		}
	}
	return errs
}

// runHistory runs the scale and replay scenarios, if selected: scale
// first, before any NATS server of the run has left memory behind.
func (r *runner) runHistory(ctx context.Context, want map[string]bool, rep *Report) error {
	if want[ScenarioScale] {
		sr, err := r.runScale(ctx)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", ScenarioScale, err)
		}
		rep.Scale = sr
	}
	if want[ScenarioReplay] {
		rr, err := r.runReplay(ctx)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", ScenarioReplay, err)
		}
		rep.Replay = rr
	}
	return nil
}

// printHistory writes the replay and scale scenarios' figures.
func printHistory(w io.Writer, rep *Report) {
	if rr := rep.Replay; rr != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "replay: a coordinator's start (New to Ready) on a log of history, from the newest snapshot and the events after it, against folding the whole log (same run)")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "EVENTS\tWORKFLOWS\tIN FLIGHT\tSNAPSHOT\tTAIL\tFULL\tFULL CPU\tFROM SNAPSHOT\tSNAPSHOT CPU\tSPEED-UP\tCPU RATIO\t")
		for _, p := range rr.Points {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%.1fx\t%s\t\n", thousands(int64(p.Events)), thousands(int64(p.Workflows)),
				p.InFlight, byteSize(float64(p.SnapshotBytes)), p.TailEvents, secs(p.FullSeconds), secs(p.FullCPUSeconds),
				secs(p.SnapshotSeconds), secs(p.SnapshotCPUSeconds), p.Speedup, ratio(p.CPURatio))
		}
		_ = tw.Flush()
	}
	if sr := rep.Scale; sr != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "scale: the coordinator's state with nodes in flight (live heap it holds; the process's resident memory, no NATS server running)")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "NODES\tWORKFLOWS\tHEAP\tHEAP/NODE\tRSS\tFOLD\t")
		for _, p := range sr.Tracked {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", thousands(int64(p.Nodes)), thousands(int64(p.Workflows)),
				byteSize(float64(p.HeapBytes)), byteSize(p.HeapPerNode), byteSize(float64(p.RSSBytes)), secs(p.FoldSeconds))
		}
		_ = tw.Flush()
		fmt.Fprintln(w, "scale: as finished workflows accumulate, retired (the default) against kept in memory (the reference)")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "FINISHED NODES\tWORKFLOWS\tRETIRED HEAP\tRETIRED RSS\tKEPT HEAP\tKEPT RSS\tRETIRED/WF\tKEPT/WF\tRETIRED/KEPT\t")
		for _, g := range sr.Growth {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", thousands(int64(g.FinishedNodes)), thousands(int64(g.Workflows)),
				byteSize(float64(g.RetiredHeap)), byteSize(float64(g.RetiredRSS)), byteSize(float64(g.KeptHeap)),
				byteSize(float64(g.KeptRSS)), byteSize(g.RetiredPerWF), byteSize(g.KeptPerWF), ratio(g.RetiredToKept))
		}
		_ = tw.Flush()
	}
}
