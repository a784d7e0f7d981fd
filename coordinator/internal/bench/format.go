package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// PrintTable writes the report for people: the figures, the memory, the
// full path's detail, and what each scenario is.
func PrintTable(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "Supervisor bench: %s %s/%s, %d CPUs (GOMAXPROCS %d), concurrency %d, %d-byte raw messages, total %.1fs\n",
		rep.GoVersion, rep.OS, rep.Arch, rep.NumCPU, rep.GOMAXPROCS, rep.Concurrency, rep.PayloadBytes, rep.TotalSeconds)

	if len(rep.Results) > 0 {
		printResults(w, rep)
	}
	if rep.CacheKey != nil {
		printCacheKey(w, rep.CacheKey)
	}
	if rep.GateScale != nil {
		printScaleOut(w, ScenarioGateScale, rep.GateScale)
	}
	if rep.WorkerScale != nil {
		printScaleOut(w, ScenarioWorkerScale, rep.WorkerScale)
	}
	if rep.Sandbox != nil {
		printSandbox(w, rep.Sandbox)
	}
	if rep.GoGate != nil {
		printGoGate(w, rep.GoGate)
	}
	if rep.Demo != nil {
		printDemo(w, rep.Demo)
	}
	printHistory(w, rep)
}

// printResults writes the bus and full-path scenarios' figures.
func printResults(w io.Writer, rep *Report) {
	fmt.Fprintln(w)
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t\n", r.Scenario, byteSize(float64(m.TotalAllocBytes)), m.Mallocs,
			byteSize(m.AllocBytesPerOp), m.AllocsPerOp, signedBytes(m.HeapDeltaBytes), secs(m.CPUSeconds), secs(m.ChildCPUSeconds),
			dur(m.CPUPerOpMicros))
	}
	tw.Flush()

	var full []Result
	for _, r := range rep.Results {
		if r.Unit == "node" && r.Feedback == nil {
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
	for _, r := range rep.Results {
		if r.Feedback != nil {
			printFeedback(w, r)
		}
	}

	fmt.Fprintln(w, "\nScenarios:")
	for _, r := range rep.Results {
		fmt.Fprintf(w, "  %-11s %s; latency: %s\n", r.Scenario, r.Description, r.Latency)
	}
	fmt.Fprintf(w, "THRU/RAW is throughput over %s's; P50/REF is p50 latency over REF's p50.\n", rep.Baseline)
}

// printFeedback writes the feedback scenario's round trip, with and
// without the retry delay, and its parts.
func printFeedback(w io.Writer, r Result) {
	fb := r.Feedback
	jitter := "no jitter"
	if fb.Jitter > 0 {
		jitter = fmt.Sprintf("±%.0f%% jitter", 100*fb.Jitter)
	}
	fmt.Fprintf(w, "\nFeedback round trip (%s): %d tasks in one workflow, retry policy %s (%s before attempt 2, %s);\n",
		r.Scenario, r.Count, fb.RetryPolicy, dur(fb.DelayMillis*1e3), jitter)
	fmt.Fprintf(w, "gate %s `%s`; p50 / p99 on the coordinator's clock, /%s is p50 over %s's p50:\n",
		FeedbackGate, strings.Join(quoteArgs(FeedbackGateCommand), " "), strings.ToUpper(r.LatencyReference), r.LatencyReference)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	ref := strings.ToUpper(r.LatencyReference)
	fmt.Fprintf(tw, "ROUND TRIP\t/%s\tBEYOND DELAY\t/%s\tDECIDE\tDELAY\tWAKE\tDISPATCH\t\n", ref, ref)
	pair := func(p50, p99 float64) string { return dur(p50) + " / " + dur(p99) }
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", pair(r.LatencyP50Micros, r.LatencyP99Micros), ratio(r.LatencyRatio),
		pair(fb.BeyondDelayP50Micros, fb.BeyondDelayP99Micros), ratio(fb.BeyondDelayRatio),
		pair(fb.DecideP50Micros, fb.DecideP99Micros), pair(fb.ScheduledDelayP50Micros, fb.ScheduledDelayP99Micros),
		pair(fb.WakeP50Micros, fb.WakeP99Micros), pair(fb.DispatchP50Micros, fb.DispatchP99Micros))
	tw.Flush()
	fmt.Fprintln(w, "ROUND TRIP runs from attempt 1's failed gate.finished to attempt 2's node.started; BEYOND DELAY from the")
	fmt.Fprintln(w, "retry's not_before to attempt 2's node.started. The round trip's parts: DECIDE gate.finished → node.retry_scheduled")
	fmt.Fprintln(w, "(the coordinator folds the result and builds the feedback); DELAY retry_scheduled → not_before (the policy's delay);")
	fmt.Fprintln(w, "WAKE not_before → node.ready of attempt 2 (the coordinator's timer); DISPATCH node.ready → node.started (the job's")
	fmt.Fprintln(w, "publish, a free agent slot, the worker's fetch). BEYOND DELAY is WAKE plus DISPATCH.")
	fmt.Fprintf(w, "%d of %d nodes went round once; %d gate results, %d from the cache; attempt 2's cache key differed from attempt 1's for %d nodes.\n",
		fb.Retries, r.Count, fb.GateResults, fb.CachedGates, fb.DistinctKeys)
}

// printCacheKey writes the cache-key scenario's figures: each size's, then
// how the operations grew.
func printCacheKey(w io.Writer, c *CacheKeyReport) {
	sizes := c.Sizes
	if len(sizes) == 0 {
		sizes = []CacheKeySize{c.CacheKeySize}
	}
	for i := range sizes {
		printCacheKeySize(w, c, &sizes[i], i == 0)
	}
	printKeyGrowth(w, c)
	for _, op := range c.Ops {
		fmt.Fprintf(w, "  %-15s %s\n", op.Name, op.Description)
	}
	fmt.Fprintln(w, "CPU/OP is the process's and its children's (git) CPU per operation; CHILDREN is the children's share.")
}

// printCacheKeySize writes one repository size's figures; first says it is
// the one the cache hits were measured on.
func printCacheKeySize(w io.Writer, c *CacheKeyReport, sz *CacheKeySize, first bool) {
	fmt.Fprintf(w, "\nGate cache key (%s): a generated repository of %s files, %d of them changed and staged (uncommitted);\n",
		ScenarioCacheKey, thousands(int64(sz.Files)), sz.ChangedFiles)
	fmt.Fprintf(w, "each operation %d times after a warm-up, on the same tree; /%s is p50 over %s's p50:\n",
		c.Iterations, strings.ToUpper(c.Reference), c.Reference)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "OPERATION\tCOUNT\tP50\tP99\tMEAN\t/%s\tCPU/OP\tCHILDREN\tALLOC/OP\t\n", strings.ToUpper(c.Reference))
	for _, op := range sz.Ops {
		m := op.Memory
		children := "-"
		if m.CPUSeconds > 0 {
			children = fmt.Sprintf("%.0f%%", 100*m.ChildCPUSeconds/m.CPUSeconds)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", op.Name, op.Count, dur(op.P50Micros), dur(op.P99Micros),
			dur(op.MeanMicros), ratio(op.Ratio), dur(m.CPUPerOpMicros), children, byteSize(m.AllocBytesPerOp))
	}
	tw.Flush()
	fmt.Fprintf(w, "integrity: capture p50 %s, check p50 %s; a capture records %s paths, hashes %s files, takes %s files' stat data from the index and makes %s stat calls\n",
		dur(sz.IntegrityCaptureP50Micros), dur(sz.IntegrityCheckP50Micros), thousands(int64(sz.IntegrityFiles)), thousands(int64(sz.IntegrityHashed)),
		thousands(int64(sz.IntegrityStatFromIndex)), thousands(int64(sz.IntegrityStatCalls)))
	how := "computed in Go"
	if sz.KeyGitPath != "" {
		how = "computed by git: " + sz.KeyGitPath
	}
	entry := ""
	if first {
		entry = "; the cached entry is " + byteSize(float64(c.EntryBytes))
	}
	fmt.Fprintf(w, "key %s (tree %s, %s)%s; generating the repository took %s\n",
		short(sz.Key), short(sz.Tree), how, entry, secs(sz.GenerateSeconds))
}

// printKeyGrowth writes how each operation grew from the first size to
// each larger one, and how much faster or slower than git status.
func printKeyGrowth(w io.Writer, c *CacheKeyReport) {
	for i := 0; i < len(c.Growth); {
		g0 := c.Growth[i]
		fmt.Fprintf(w, "\nGrowth from %s to %s files (%.3gx): the larger size's p50 and CPU per operation over the smaller's:\n",
			thousands(int64(g0.FromFiles)), thousands(int64(g0.ToFiles)), float64(g0.ToFiles)/float64(g0.FromFiles))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "OPERATION\tP50 GROWTH\tCPU GROWTH\t/%s AT %s\tAT %s\t\n", strings.ToUpper(c.Reference),
			thousands(int64(g0.FromFiles)), thousands(int64(g0.ToFiles)))
		var ref *KeyGrowth
		var others []KeyGrowth
		for ; i < len(c.Growth) && c.Growth[i].ToFiles == g0.ToFiles; i++ {
			g := c.Growth[i]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", g.Op, ratio(g.P50), ratio(g.CPU), ratio(g.RatioFrom), ratio(g.RatioTo))
			if g.Op == c.Reference {
				ref = &c.Growth[i]
			} else {
				others = append(others, g)
			}
		}
		tw.Flush()
		if ref == nil || ref.P50 <= 0 || ref.CPU <= 0 {
			continue
		}
		parts := make([]string, 0, len(others))
		for _, g := range others {
			parts = append(parts, fmt.Sprintf("%s %s (CPU %s)", g.Op, ratio(g.P50/ref.P50), ratio(g.CPU/ref.CPU)))
		}
		fmt.Fprintf(w, "against %s's growth (p50, CPU): %s\n", c.Reference, strings.Join(parts, ", "))
	}
}

// printScaleOut writes a scale-out scenario's figures (gate-scale,
// worker-scale).
func printScaleOut(w io.Writer, scenario string, g *ScaleOutReport) {
	sleep := strconv.FormatFloat(g.SleepSeconds, 'f', -1, 64)
	unit := g.Kind
	if g.Kind == "gate" {
		fmt.Fprintf(w, "\nGate throughput (%s): gaterunner processes of --concurrency %d, %s sandbox; %d tasks (agent `%s`, %d agent slots),\n",
			scenario, g.RunnerConcurrency, g.Sandbox, g.Tasks, strings.Join(NoopCommand, " "), g.WorkerConcurrency)
		fmt.Fprintf(w, "one `sleep %s` gate each, cache: false, so every gate runs:\n", sleep)
	} else {
		fmt.Fprintf(w, "\nAgent throughput (%s): worker processes of --concurrency %d, %s sandbox; %d tasks whose agent is `sleep %s`, no gates:\n",
			scenario, g.RunnerConcurrency, g.Sandbox, g.Tasks, sleep)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "RUNNERS\t%sS\tWINDOW\tTHROUGHPUT\tIDEAL\tOF IDEAL\tSPEED-UP\tOF LINEAR\tOVERHEAD/JOB\tRUNNER CPU/JOB\tLATENCY\tPER RUNNER\t\n",
		strings.ToUpper(unit))
	for _, r := range g.Runs {
		per := make([]string, len(r.JobsPerRunner))
		for i, n := range r.JobsPerRunner {
			per[i] = strconv.Itoa(n)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%.2f %s/s\t%.2f/s\t%.0f%%\t%.2fx\t%.0f%%\t%s\t%s\t%s / %s\t%s\t\n", r.Runners, r.Jobs,
			secs(r.WindowSeconds), r.Throughput, unit, r.IdealThroughput, 100*r.OfIdeal, r.Speedup, 100*r.OfLinear,
			dur(r.OverheadPerJobMillis*1e3), dur(r.RunnerCPUPerJobMillis*1e3), dur(r.JobLatencyP50Micros), dur(r.JobLatencyP99Micros),
			strings.Join(per, "/"))
	}
	tw.Flush()
	for i, r := range g.Runs {
		if i == 0 {
			fmt.Fprintf(w, "  %s: %.2f %ss/s (%.0f%% of the sleep-bound ideal, %.2f/s)\n", plural(r.Runners, "runner"), r.Throughput,
				unit, 100*r.OfIdeal, r.IdealThroughput)
			continue
		}
		fmt.Fprintf(w, "  %s: %.2fx (%.0f%% of linear)\n", plural(r.Runners, "runner"), r.Speedup, 100*r.OfLinear)
	}
	fmt.Fprintf(w, "Note: %s.\n", g.Note)
	if g.Kind == "gate" {
		fmt.Fprintln(w, "WINDOW runs from the first gate.dispatched to the last gate.finished; OVERHEAD/JOB is the runner slot time")
		fmt.Fprintln(w, "per gate beyond the sleep; RUNNER CPU/JOB the runner processes' CPU (with git and sleep) per gate; LATENCY")
		fmt.Fprintln(w, "is gate dispatched→started, p50 / p99.")
		return
	}
	fmt.Fprintln(w, "WINDOW runs from the first node.ready to the last node.agent_done; OVERHEAD/JOB is the runner slot time")
	fmt.Fprintln(w, "per agent beyond the sleep; RUNNER CPU/JOB the worker processes' CPU (with git and sleep) per agent; LATENCY")
	fmt.Fprintln(w, "is node ready→started, p50 / p99.")
}

// printGoGate writes the go-gate scenario's figures, or why it was
// skipped.
func printGoGate(w io.Writer, g *GoGateReport) {
	command := strings.Join(quoteArgs(g.Command), " ")
	if g.Skipped != "" {
		fmt.Fprintf(w, "\nA Go gate with warm caches (%s): skipped: %s\n", ScenarioGoGate, g.Skipped)
		return
	}
	warm := make([]string, len(g.Warmup))
	for i, c := range g.Warmup {
		warm[i] = strings.Join(quoteArgs(c), " ")
	}
	fmt.Fprintf(w, "\nA Go gate with warm caches (%s): `%s`, caches warmed by `%s`; %d runs of each sandbox after one unmeasured round,\n",
		ScenarioGoGate, command, strings.Join(warm, "`, `"), g.Runs)
	fmt.Fprintln(w, "interleaved; wall time per gate, from the call until it returned:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "VARIANT\tRUNS\tP50\tMEAN\tCOMMAND P50\tWARM-UP\tGO\t")
	for _, v := range g.Variants {
		warm := "-"
		if v.WarmupSeconds > 0 {
			warm = secs(v.WarmupSeconds)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", v.Name, v.Count, dur(v.P50Micros), dur(v.MeanMicros),
			dur(v.CommandP50Micros), warm, strings.TrimPrefix(v.GoVersion, "go version "))
	}
	tw.Flush()
	fmt.Fprintf(w, "  docker sandbox, warm: %s the process sandbox, warm (issue 13 figure 4 per gate: at most 1.25x)\n", ratio(g.DockerOverProcess))
	fmt.Fprintf(w, "  docker sandbox, warm: %s the same reading the image from its layers alone\n", ratio(g.DockerOverLayers))
	fmt.Fprintf(w, "  docker sandbox, prestarted: %s the process sandbox, warm (figure 4 per gate, as a gate runner runs it by default)\n", ratio(g.PrestartedOverProcess))
	for _, v := range g.Variants {
		fmt.Fprintf(w, "  %-14s %s\n", v.Name, v.Description)
	}
}

// printDemo writes the demo scenario's figures, or why it was skipped.
func printDemo(w io.Writer, d *DemoReport) {
	if d.Skipped != "" {
		fmt.Fprintf(w, "\nThe demo workflow per sandbox (%s): skipped: %s\n", ScenarioDemo, d.Skipped)
		return
	}
	fmt.Fprintf(w, "\nThe demo workflow per sandbox (%s): %s (%d tasks, each gated by go vet and go test), on a worker and a gate runner\n",
		ScenarioDemo, d.Workflow, d.Tasks)
	fmt.Fprintf(w, "process of concurrency %d per sandbox; %d demos of each after one unmeasured demo each, alternating; wall time from\n",
		demoConcurrency, d.Runs)
	fmt.Fprintln(w, "the submit to workflow.finished:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "VARIANT\tRUNS\tMEDIAN\tMIN\tMAX\tCPU\tAGENT RUN\tGATE RUN\tGATE LATENCY\tWARM-UP\t")
	for _, v := range d.Variants {
		warm := "-"
		if v.WarmupSeconds > 0 {
			warm = secs(v.WarmupSeconds)
		}
		cpu := "-"
		if v.MedianCPUSeconds > 0 {
			cpu = secs(v.MedianCPUSeconds)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", v.Name, len(v.Seconds), secs(v.MedianSeconds), secs(v.MinSeconds),
			secs(v.MaxSeconds), cpu, dur(v.AgentRunP50Micros), dur(v.GateRunP50Micros), dur(v.GateLatencyP50Micros), warm)
	}
	tw.Flush()
	fmt.Fprintln(w, "  (CPU: the machine's busy CPU time during a demo, every process's, median; AGENT RUN: node started → agent done;")
	fmt.Fprintln(w, "  GATE RUN: gate started → finished; GATE LATENCY: dispatched → started; p50s)")
	fmt.Fprintf(w, "  docker: %s process by the medians (issue 13 figure 4, the demo: at most 1.25x)\n", ratio(d.DockerOverProcess))
	for _, v := range d.Variants {
		fmt.Fprintf(w, "  %-8s %s\n", v.Name, v.Description)
	}
	fmt.Fprintf(w, "  the runners' data (the Docker gate runner's warmed caches among it) is kept in %s\n", d.DataDir)
}

// printSandbox writes the sandbox scenario's figures, or why it was
// skipped.
func printSandbox(w io.Writer, s *SandboxReport) {
	command := strings.Join(quoteArgs(s.Command), " ")
	if s.Skipped != "" {
		fmt.Fprintf(w, "\nSandbox overhead per gate (%s): skipped: %s\n", ScenarioSandbox, s.Skipped)
		return
	}
	engine := "Docker"
	if e := s.Engine; e != nil {
		engine = fmt.Sprintf("Docker %s (%s storage driver", e.Version, e.StorageDriver)
		if e.CgroupVersion != "" {
			engine += ", cgroup v" + e.CgroupVersion
		}
		if e.Runtime != "" {
			engine += ", " + e.Runtime
		}
		engine += fmt.Sprintf(", %d CPUs)", e.NCPU)
	}
	fmt.Fprintf(w, "\nSandbox overhead per gate (%s): `%s` in %s (%s) on %s;\n", ScenarioSandbox, command, s.Image, short(strings.TrimPrefix(s.ImageID, "sha256:")), engine)
	fmt.Fprintf(w, "%d runs of each variant after %d warm-up rounds, interleaved round-robin; wall time per gate, from the call until it returned;\n",
		s.Runs, s.Warmups)
	fmt.Fprintf(w, "OVER %s is p50 minus %s's p50; /%s and /DOCKER RUN are ratios of p50s:\n",
		strings.ToUpper(s.Reference), s.Reference, strings.ToUpper(s.Reference))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "VARIANT\tRUNS\tP50\tP90\tMEAN\tOVER %s\t/%s\t/DOCKER RUN\tCOMMAND P50\tBENCH CPU\tCHILD CPU\tENGINE CPU\tOTHER CPU\t\n",
		strings.ToUpper(s.Reference), strings.ToUpper(s.Reference))
	cpu := func(ms float64) string {
		if !s.CPUMeasured {
			return "-"
		}
		return fmt.Sprintf("%.1fms", ms)
	}
	for _, v := range s.Variants {
		over := "-"
		if v.Name != s.Reference && v.RatioToProcess > 0 {
			over = fmt.Sprintf("%+.2fms", v.OverheadMillis)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", v.Name, v.Count, dur(v.P50Micros), dur(v.P90Micros),
			dur(v.MeanMicros), over, ratio(v.RatioToProcess), ratio(v.RatioToDockerRun), dur(v.CommandP50Micros),
			cpu(v.BenchCPUMillis), cpu(v.ChildCPUMillis), cpu(v.EngineCPUMillis), cpu(v.OtherCPUMillis))
	}
	tw.Flush()
	if d := s.Variant(VariantDockerSandbox); d != nil {
		line := fmt.Sprintf("  docker sandbox: %+.2fms per gate over the process sandbox (%s)", d.OverheadMillis, ratio(d.RatioToProcess))
		if d.RatioToDockerRun > 0 {
			line += fmt.Sprintf("; %s plain docker run", ratio(d.RatioToDockerRun))
		}
		if d.RatioToHardened > 0 {
			line += fmt.Sprintf(", %s the hardened docker run", ratio(d.RatioToHardened))
		}
		fmt.Fprintln(w, line)
	}
	if h, p := s.Variant(VariantDockerRunHardened), s.Variant(VariantDockerRun); h != nil && p != nil && p.P50Micros > 0 {
		fmt.Fprintf(w, "  hardening flags: %+.2fms per gate over plain docker run (%s)\n", (h.P50Micros-p.P50Micros)/1e3, ratio(h.RatioToDockerRun))
	}

	var phased []SandboxVariant
	for _, v := range s.Variants {
		if v.Phases != nil {
			phased = append(phased, v)
		}
	}
	if len(phased) > 0 {
		fmt.Fprintln(w, "The Docker variants' wall time split at the engine's container events (means per gate, which add up to MEAN):")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "VARIANT\tRUNS\tCALL→CREATE\tCREATE→START\tSTART→DIE\tDIE→DESTROY\tDESTROY→RETURN\t")
		for _, v := range phased {
			p := v.Phases
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", v.Name, p.Runs, dur(p.CallToCreateMicros), dur(p.CreateToStartMicros),
				dur(p.StartToDieMicros), dur(p.DieToDestroyMicros), dur(p.DestroyToReturnMicros))
		}
		tw.Flush()
	}
	for _, v := range s.Variants {
		fmt.Fprintf(w, "  %-20s %s\n", v.Name, v.Description)
		if len(v.Argv) > 0 {
			fmt.Fprintf(w, "  %-20s   %s\n", "", strings.Join(quoteArgs(v.Argv), " "))
		}
	}
	fmt.Fprintln(w, "COMMAND P50 is the sandbox's own Result.Duration: from starting the command (for Docker, by the engine's clock) until it")
	fmt.Fprintln(w, "exited. CPU is per gate: BENCH this process (sandbox code, Docker SDK client); CHILD the processes it waited for (the")
	fmt.Fprintln(w, "command, the docker CLI); ENGINE dockerd and containerd; OTHER the rest of the machine's busy time (container shims,")
	fmt.Fprintln(w, "runc, fuse-overlayfs or other storage helpers, the kernel, and anything else running).")
	for _, n := range s.Notes {
		fmt.Fprintf(w, "Note: %s.\n", n)
	}
}

// quoteArgs quotes the arguments a shell would split or drop.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}();&|<>#~") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return out
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// short abbreviates a hex id.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
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

func byteSize(v float64) string {
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
		return "-" + byteSize(float64(-v))
	}
	return "+" + byteSize(float64(v))
}
