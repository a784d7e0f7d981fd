package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// PrintTable writes the report for people: the figures, the memory, the
// full path's detail, and what each scenario is.
func PrintTable(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "Supervisor bench: %s %s/%s, %d CPUs (GOMAXPROCS %d), concurrency %d, %d-byte raw messages, total %.1fs\n\n",
		rep.GoVersion, rep.OS, rep.Arch, rep.NumCPU, rep.GOMAXPROCS, rep.Concurrency, rep.PayloadBytes, rep.TotalSeconds)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SCENARIO\tCOUNT\tWALL\tTHROUGHPUT\tP50\tP99\tTHRU/RAW\tP50/REF\tREF\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Scenario, r.Count,
			secs(r.WallSeconds), rate(r.Throughput, r.Unit), dur(r.LatencyP50Micros), dur(r.LatencyP99Micros),
			ratio(r.ThroughputRatio), ratio(r.LatencyRatio), r.LatencyReference)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nMemory and CPU of the whole process (NATS server, coordinator, runners, bench client; CPU includes")
	fmt.Fprintln(w, "child processes: git, agents, gates) during each measurement:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SCENARIO\tALLOCATED\tALLOCS\tBYTES/OP\tALLOCS/OP\tLIVE HEAP Δ\tCPU\tCHILDREN\tCPU/OP\t")
	for _, r := range rep.Results {
		m := r.Memory
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t\n", r.Scenario, bytes(float64(m.TotalAllocBytes)), m.Mallocs,
			bytes(m.AllocBytesPerOp), m.AllocsPerOp, signedBytes(m.HeapDeltaBytes), secs(m.CPUSeconds), secs(m.ChildCPUSeconds),
			dur(m.CPUPerOpMicros))
	}
	tw.Flush()

	var full []Result
	for _, r := range rep.Results {
		if r.Unit == "node" {
			full = append(full, r)
		}
	}
	if len(full) > 0 {
		fmt.Fprintln(w, "\nFull path detail, p50/p99 (TURNAROUND node ready→finished; RUN node started→agent done;")
		fmt.Fprintln(w, "SETTLE agent done→node finished, i.e. gates and integration; GATE gate dispatched→started):")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "SCENARIO\tWORKFLOWS\tTURNAROUND\tRUN\tSETTLE\tGATE\t")
		pair := func(p50, p99 float64) string { return dur(p50) + " / " + dur(p99) }
		for _, r := range full {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", r.Scenario, r.Workflows,
				pair(r.TurnaroundP50Micros, r.TurnaroundP99Micros), pair(r.RunP50Micros, r.RunP99Micros),
				pair(r.SettleP50Micros, r.SettleP99Micros), pair(r.GateLatencyP50Micros, r.GateLatencyP99Micros))
		}
		tw.Flush()
	}

	fmt.Fprintln(w, "\nScenarios:")
	for _, r := range rep.Results {
		fmt.Fprintf(w, "  %-11s %s; latency: %s\n", r.Scenario, r.Description, r.Latency)
	}
	fmt.Fprintf(w, "THRU/RAW is throughput over %s's; P50/REF is p50 latency over REF's p50.\n", rep.Baseline)
}

func secs(s float64) string { return fmt.Sprintf("%.2fs", s) }

func rate(v float64, unit string) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%s %s/s", thousands(int64(v+0.5)), unit)
	default:
		return fmt.Sprintf("%.1f %s/s", v, unit)
	}
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// dur renders microseconds with a readable unit ("-" for none).
func dur(us float64) string {
	if us <= 0 {
		return "-"
	}
	d := time.Duration(us * float64(time.Microsecond))
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", us)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", us/1e3)
	default:
		return fmt.Sprintf("%.2fs", us/1e6)
	}
}

func ratio(v float64) string {
	switch {
	case v <= 0:
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0fx", v)
	case v >= 10:
		return fmt.Sprintf("%.1fx", v)
	case v >= 0.01:
		return fmt.Sprintf("%.2fx", v)
	default:
		return fmt.Sprintf("%.4fx", v)
	}
}

func bytes(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.1f GiB", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", v)
	}
}

func signedBytes(v int64) string {
	if v < 0 {
		return "-" + bytes(float64(-v))
	}
	return "+" + bytes(float64(v))
}
