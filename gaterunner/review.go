package gaterunner

// Review gates (EXE-009, OUT-05, OUT-07): each reviewer is a fresh run of
// an agent CLI, through its shared/agentcli adapter, in the gate's sandbox
// on the node's work. Its prompt is the gate's instructions, the node's
// task, the node's diff and the review schema's instructions; its final
// message must end with a review block. APPROVED counts as an approval;
// CHANGES_REQUESTED, REJECTED and no valid block (OUT-07) do not. The gate
// passes when the approvals reach the quorum. Reviewers change nothing:
// any write to the workspace is an integrity violation. A review gate is
// never cached.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/agentoutput"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/feedback"
	"github.com/supervisorhq/supervisor/shared/integrity"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// Bounds of what a reviewer is shown and what is kept of its output.
const (
	// DefaultMaxDiffBytes caps the diff in a reviewer's prompt when the
	// gate sets no max_diff_bytes.
	DefaultMaxDiffBytes = 200 << 10
	// maxTaskPrompt caps the task quoted in a reviewer's prompt.
	maxTaskPrompt = 64 << 10
	// maxReviewerOutput caps the standard output kept of one reviewer.
	maxReviewerOutput = 8 << 20
	// maxReviewerText is how much of a command adapter's output, from
	// its end, is read as its final message.
	maxReviewerText = 64 << 10
)

// defaultReviewPrompt is a review gate's instructions when it sets none.
const defaultReviewPrompt = "You are a code reviewer. Review the change below, made for the task quoted under it: " +
	"is it correct, complete, tested, safe and in keeping with the code around it? Do not change any file. " +
	"Approve only a change you would merge as it is; otherwise list each issue with its file, line and a suggestion."

// splitOwn separates the node's own patch (the last, when it is the
// node's) from the patches it builds on.
func splitOwn(job *protocol.GateJob) (deps []protocol.PatchRef, own *protocol.PatchRef) {
	deps = job.Patches
	if n := len(deps); n > 0 && deps[n-1].NodeID == job.NodeID {
		p := deps[n-1]
		return deps[:n-1], &p
	}
	return deps, nil
}

// runReview runs a review gate job: the workspace is the node's
// dependencies committed with its own work on top, uncommitted, so the
// diff shown is the node's alone.
func (r *Runner) runReview(ctx context.Context, job *protocol.GateJob, token uint64, def gateDef) (out jobrun.Outcome) {
	began := time.Now()
	logw := &jobrun.LogWriter{}
	spec := def.review
	logw.Printf("review gate %s for %s/%s attempt %d round %d on %s (lease %d): %d reviewers, %d approvals needed",
		job.Gate, job.WorkflowID, job.NodeID, job.Attempt, job.Round, r.deps.Host, token, len(spec.Reviewers), spec.Approvals)
	deps, own := splitOwn(job)
	pctx, span := telemetry.Start(ctx, jobrun.SpanWorkspace)
	ws, err := r.deps.Workspaces.Prepare(pctx, job.Repo, deps, job.JobID)
	telemetry.End(span, err)
	if errors.Is(err, workspace.ErrConflict) {
		return r.patchesConflict(ctx, job, token, began, err)
	}
	if err != nil {
		return jobrun.Outcome{Err: fmt.Errorf("prepare workspace: %w", err), Repo: jobrun.Broke}
	}
	// Emptied once the result is reported.
	defer func() { out.After = jobrun.CloseAfter(ws, r.deps.Log) }()
	if own != nil {
		if err := ws.ApplyWork(ctx, *own); errors.Is(err, workspace.ErrConflict) {
			return r.patchesConflict(ctx, job, token, began, err)
		} else if err != nil {
			return jobrun.Outcome{Err: fmt.Errorf("apply the node's work: %w", err), Repo: jobrun.Broke}
		}
	}
	diff, err := ws.Diff(ctx)
	if err != nil {
		return jobrun.Outcome{Err: fmt.Errorf("the node's diff: %w", err), Repo: jobrun.Broke}
	}
	prompt := ReviewPrompt(spec, job.TaskPrompt, diff)
	if spec.Context != nil {
		// The strategy packs what the reviewer sees: the task as its plan,
		// the node's diff and changed files against the dependencies.
		cs := *spec.Context
		cs.Plan = job.TaskPrompt
		packed, err := contextpack.Pack(ctx, contextpack.Request{Dir: ws.Dir, Git: ws.Git(), Base: ws.Base, Spec: cs,
			Task: reviewTask(spec)})
		var tooLarge *contextpack.TooLargeError
		var invalid *contextpack.DefinitionError
		switch {
		case errors.As(err, &tooLarge) || errors.As(err, &invalid):
			// The review cannot be put to a reviewer: the gate cannot run.
			g := r.result(job, token, began)
			g.Status, g.Error = protocol.GateError, "pack the reviewers' context: "+err.Error()
			g.Output = truncateOutput(r.keys.Scrub(g.Error))
			logw.Printf("%s", g.Error)
			logName := fmt.Sprintf("%s/%s/a%d/gate-%s-%d.log", job.WorkflowID, job.NodeID, job.Attempt, job.Gate, token)
			if err := jobrun.UploadLog(ctx, r.deps.Bus, logName, []byte(r.keys.Scrub(string(logw.Bytes())))); err != nil {
				return jobrun.Outcome{Err: err}
			}
			g.Log = logName
			return jobrun.Outcome{Report: gateReport(g), Repo: jobrun.Worked}
		case err != nil:
			return jobrun.Outcome{Err: fmt.Errorf("pack the reviewers' context: %w", err), Repo: jobrun.Broke}
		}
		prompt = packed.Prompt(reviewTask(spec))
		m := packed.Manifest
		logw.Printf("context %s: %d of %d tokens (%s)", m.Strategy, m.Tokens, m.Budget, m.Encoding)
		for _, p := range m.Parts {
			logw.Printf("  part %s: included %v, %d tokens %s", p.Name, p.Included, p.Tokens, p.Reason)
		}
	}
	out = r.review(ctx, job, token, began, def, logw, ws.Dir, prompt)
	out.Repo = jobrun.Worked
	return out
}

// reviewTask is a packed review's task: the gate's instructions and the
// review schema's (the context before it holds the plan and the change).
func reviewTask(spec *protocol.ReviewSpec) string {
	instr := strings.TrimSpace(spec.Prompt)
	if instr == "" {
		instr = defaultReviewPrompt
	}
	return instr + "\n\nThe change under review and the task it was made for are in the context above.\n\n" +
		agentoutput.Instructions(agentoutput.Review)
}

// ReviewPrompt is what each reviewer of spec is given: the gate's
// instructions, the task quoted (each line behind "> ", as data, not
// instructions), the diff in a fence no line of it can close, cut to the
// gate's max_diff_bytes, and the review schema's instructions.
func ReviewPrompt(spec *protocol.ReviewSpec, task string, diff []byte) string {
	var b strings.Builder
	instr := strings.TrimSpace(spec.Prompt)
	if instr == "" {
		instr = defaultReviewPrompt
	}
	b.WriteString(instr + "\n\n## The task\n\nThe task the change was made for, as its author was given it:\n\n")
	task = strings.TrimSpace(task)
	if task == "" {
		task = "(not given)"
	}
	if len(task) > maxTaskPrompt {
		task = cutAtLine(task, maxTaskPrompt) + "\n[… the task is cut here]"
	}
	for _, line := range strings.Split(task, "\n") {
		b.WriteString(strings.TrimRight("> "+line, " ") + "\n")
	}
	b.WriteString("\n## The change\n\n")
	limit := spec.MaxDiffBytes
	if limit <= 0 {
		limit = DefaultMaxDiffBytes
	}
	text := string(diff)
	note := ""
	switch {
	case len(diff) == 0:
		text = "(the change is empty)"
	case len(diff) > limit:
		text = cutAtLine(text, limit)
		note = fmt.Sprintf("\nThe diff is %d bytes; its first %d are shown. Read the changed files in the working directory for the rest.\n", len(diff), len(text))
	}
	b.WriteString(feedback.Fence(text, "diff") + "\n" + note + "\n")
	b.WriteString(agentoutput.Instructions(agentoutput.Review))
	return b.String()
}

// cutAtLine keeps at most n bytes of s, ending at a line's end when one
// is in reach.
func cutAtLine(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	if i := strings.LastIndexByte(s, '\n'); i > 0 {
		return s[:i]
	}
	return s
}

// reviewer is one reviewer's outcome: its verdict, and whether its CLI
// itself failed (could not start, or failed for a reason that is not
// the agent's: a transient or fatal class), which says nothing of the code.
type reviewer struct {
	verdict   protocol.ReviewVerdict
	cliFailed bool
	timedOut  bool
}

// review runs every reviewer in dir at once, between an integrity
// capture and check, and reports the gate.
func (r *Runner) review(ctx context.Context, job *protocol.GateJob, token uint64, began time.Time, def gateDef,
	logw *jobrun.LogWriter, dir, prompt string) jobrun.Outcome {

	spec := def.review
	// dir is the workspace runReview has just prepared: written with its
	// index by Prepare and ApplyWork (`git read-tree -u`, `git apply
	// --index`), then only staged (`git add --all`, which writes no file)
	// and read by git: its index holds every tracked file's stat data
	// (PERF-53).
	ictx, span := telemetry.Start(ctx, jobrun.SpanIntegrity, attribute.String("supervisor.phase", "capture"))
	base, err := integrity.Capture(ictx, dir, integrity.Options{IndexFresh: true})
	telemetry.End(span, err)
	if err != nil {
		return jobrun.Outcome{Err: fmt.Errorf("integrity: capture the workspace before the review: %w", err)}
	}
	res := &protocol.ReviewResult{Required: spec.Approvals, CostKnown: true}
	failedCLIs := 0
	var sandboxes []string
	// The reviewers run at once, each with a log of its own, appended to
	// the gate's in order once all are done.
	type ran struct {
		rv  reviewer
		env string
		err error
		log *jobrun.LogWriter
	}
	runs := make([]ran, len(spec.Reviewers))
	var wg sync.WaitGroup
	for i, a := range spec.Reviewers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lw := &jobrun.LogWriter{}
			rv, env, err := r.runReviewer(ctx, job, def, i+1, a, prompt, dir, lw)
			runs[i] = ran{rv: rv, env: env, err: err, log: lw}
		}()
	}
	wg.Wait()
	for _, x := range runs {
		_, _ = logw.Write(x.log.Bytes())
	}
	for _, x := range runs {
		rv, env, err := x.rv, x.env, x.err
		if err != nil {
			return jobrun.Outcome{Err: err}
		}
		if env != "" {
			sandboxes = append(sandboxes, env)
		}
		v := rv.verdict
		if v.Approved {
			res.Approvals++
		}
		if rv.cliFailed {
			failedCLIs++
		}
		if v.Run != nil {
			res.Usage = res.Usage.Add(v.Run.Usage)
			res.CostUSD += v.Run.CostUSD
			res.CostKnown = res.CostKnown && v.Run.CostKnown
		} else {
			res.CostKnown = false
		}
		res.Reviewers = append(res.Reviewers, v)
	}
	if ctx.Err() != nil {
		return jobrun.Outcome{Err: ctx.Err()}
	}
	ictx, span = telemetry.Start(ctx, jobrun.SpanIntegrity, attribute.String("supervisor.phase", "check"))
	rep, err := base.Check(ictx)
	telemetry.End(span, err)
	if err != nil {
		return jobrun.Outcome{Err: fmt.Errorf("integrity: check the workspace after the review: %w", err)}
	}

	g := r.result(job, token, began)
	g.Review = res
	g.DurationMillis = time.Since(began).Milliseconds()
	g.CacheDisabled = "a review gate is never cached"
	if len(sandboxes) > 0 {
		g.Sandbox = sandboxes[0]
	}
	verdict := jobrun.Worked
	switch {
	case res.Approvals >= res.Required:
		g.Status = protocol.GatePassed
	case failedCLIs == len(res.Reviewers):
		// No reviewer could judge the code: the gate could not run.
		g.Status, g.Error = protocol.GateError, "no reviewer could run: "+res.Reviewers[0].Problem
		verdict = jobrun.Broke
	default:
		g.Status = protocol.GateFailed
		g.Error = fmt.Sprintf("%d of %d reviewers approved; %d needed", res.Approvals, len(res.Reviewers), res.Required)
	}
	if !rep.Clean() {
		summary := (&integrity.Report{Violations: rep.Violations}).Summary()
		g.Status, g.IntegrityViolation, g.Violations = protocol.GateFailed, true, rep.Strings()
		g.Error = joinNonEmpty("; ", g.Error, "a reviewer changed the workspace: "+summary)
		logw.Printf("%s", summary)
	}
	logw.Printf("review gate %s: %d of %d approved (%d needed): %s", job.Gate, res.Approvals, len(res.Reviewers), res.Required, g.Status)
	g.Output = truncateOutput(r.keys.Scrub(ReviewSummary(res) + joinNonEmpty("\n", "", g.Error)))
	logName := fmt.Sprintf("%s/%s/a%d/gate-%s-%d.log", job.WorkflowID, job.NodeID, job.Attempt, job.Gate, token)
	uctx, span := telemetry.Start(ctx, jobrun.SpanUpload, attribute.String("supervisor.object", logName))
	err = jobrun.UploadLog(uctx, r.deps.Bus, logName, []byte(r.keys.Scrub(string(logw.Bytes()))))
	telemetry.End(span, err)
	if err != nil {
		return jobrun.Outcome{Err: err}
	}
	g.Log = logName
	g.FinishedAt = time.Now().UTC()
	return jobrun.Outcome{Report: gateReport(g), Work: verdict}
}

// runReviewer runs reviewer number i (from 1) with agent a, logging to
// logw, and reads its verdict. The error is an infrastructure failure: the job is handed back.
func (r *Runner) runReviewer(ctx context.Context, job *protocol.GateJob, def gateDef, i int, a protocol.AgentSpec,
	prompt, dir string, logw *jobrun.LogWriter) (reviewer, string, error) {

	rv := reviewer{verdict: protocol.ReviewVerdict{Reviewer: i, Adapter: a.Adapter, Model: a.Model}}
	ad, ok := agentcli.Lookup(a.Adapter)
	if !ok {
		rv.verdict.Problem, rv.cliFailed = fmt.Sprintf("unknown agent adapter %q", a.Adapter), true
		logw.Printf("reviewer %d: %s", i, rv.verdict.Problem)
		return rv, "", nil
	}
	settings := agentcli.SpecSettings(a)
	inv, err := ad.Invocation(prompt, settings)
	if err != nil {
		rv.verdict.Problem, rv.cliFailed = "agent settings: "+err.Error(), true
		logw.Printf("reviewer %d: %s", i, rv.verdict.Problem)
		return rv, "", nil
	}
	shown := make([]string, len(inv.Argv))
	for k, s := range inv.Argv {
		if s == prompt {
			s = fmt.Sprintf("<prompt: %d bytes>", len(prompt))
		}
		shown[k] = s
	}
	logw.Printf("reviewer %d (%s): %s", i, a.Adapter, strings.Join(shown, " "))

	own := make(map[string]string, len(def.env))
	for k, v := range def.env {
		if agentcli.IsCredential(k) {
			logw.Printf("reviewer %d: dropped %s from the gate's environment: provider keys come from the gate runner only", i, k)
			continue
		}
		own[k] = v
	}
	env := jobrun.Env(own, job.WorkflowID, job.NodeID, job.Attempt)
	if keys := r.keys.Env(a.Adapter); len(keys) > 0 {
		names := make([]string, 0, len(keys))
		for k, v := range keys {
			env[k] = v
			names = append(names, k)
		}
		sort.Strings(names)
		logw.Printf("reviewer %d: credentials: %s", i, strings.Join(names, ", "))
	}
	env["SUPERVISOR_TASK_ID"] = job.NodeID
	env["SUPERVISOR_GATE_NAME"] = job.Gate
	env["SUPERVISOR_REPO_ID"] = job.Repo.ID
	env["SUPERVISOR_REVIEWER"] = strconv.Itoa(i)
	env["SUPERVISOR_REVIEW_ID"] = fmt.Sprintf("%s.%s.a%d", job.WorkflowID, job.NodeID, job.Attempt)
	stdout := &cappedBuffer{limit: maxReviewerOutput}
	sspec := sandbox.Spec{
		Argv: inv.Argv, Workspace: dir, WorkingDir: def.workingDir, Env: env, WorkspaceEnv: "SUPERVISOR_REPO_PATH",
		Timeout: time.Duration(def.timeoutSeconds) * time.Second, Stdout: stdout, Stderr: logw, Image: def.image,
		Labels: map[string]string{"workflow": job.WorkflowID, "node": job.NodeID, "gate": job.Gate,
			"attempt": strconv.Itoa(job.Attempt), "round": strconv.Itoa(job.Round), "reviewer": strconv.Itoa(i)},
	}
	if inv.PromptOnStdin {
		sspec.Stdin = strings.NewReader(inv.Stdin)
	}
	if rs := def.resources; rs != nil {
		sspec.Resources = sandbox.Resources{MemoryBytes: rs.MemoryBytes, CPUs: rs.CPUs, Pids: rs.PIDs}
	}
	// The reviewer's CLI joins the trace as a child of its run.
	sctx, span := telemetry.Start(ctx, jobrun.SpanSandboxRun, attribute.Int("supervisor.reviewer", i))
	trace := telemetry.ProcessEnv(sctx)
	if a.Adapter == "claude-code" {
		trace = telemetry.ClaudeCodeEnv(sctx, telemetry.Active())
	}
	maps.Copy(env, trace)
	res, err := r.deps.Sandbox.Run(sctx, sspec)
	telemetry.End(span, err)
	switch {
	case errors.Is(err, sandbox.ErrStart) || errors.Is(err, sandbox.ErrInvalidSpec):
		rv.verdict.Problem, rv.cliFailed = "cannot start the reviewer: "+r.keys.Scrub(err.Error()), true
		logw.Printf("reviewer %d: %s", i, rv.verdict.Problem)
		return rv, "", nil
	case err != nil:
		return rv, "", fmt.Errorf("run reviewer %d: %w", i, err)
	}
	out := stdout.Bytes()
	_, _ = logw.Write(out)
	parsed, perr := agentcli.Parse(ad.NewParser(settings), bytes.NewReader(out), res.ExitCode, res.Stderr, nil)
	if perr != nil {
		return rv, "", fmt.Errorf("read reviewer %d's output: %w", i, perr)
	}
	run := wireRun(parsed, r.keys.Scrub)
	rv.verdict.Run = &run
	text := parsed.Text
	if a.Adapter == "command" {
		// The command adapter reads no final message: its output's tail is.
		text = string(out[max(0, len(out)-maxReviewerText):])
	}
	switch {
	case res.TimedOut:
		rv.timedOut = true
		rv.verdict.Problem = fmt.Sprintf("the reviewer ran past the gate's timeout (%ds)", def.timeoutSeconds)
	case !parsed.Success || res.ExitCode != 0:
		why := parsed.Error
		if why == "" {
			why = fmt.Sprintf("exit code %d", res.ExitCode)
		}
		rv.verdict.Problem = "the reviewer's CLI failed: " + r.keys.Scrub(why)
		rv.cliFailed = parsed.Class == agentcli.Transient || parsed.Class == agentcli.Fatal
	default:
		o, err := agentoutput.Parse(agentoutput.Review, r.keys.Scrub(text))
		var ie *agentoutput.InvalidError
		switch {
		case err == nil:
			fillVerdict(&rv.verdict, o.Review)
		case errors.Is(err, agentoutput.ErrNoBlock):
			rv.verdict.Problem = "no review block: the final message has no JSON block"
		case errors.As(err, &ie):
			var vs []string
			for _, v := range ie.Violations {
				vs = append(vs, strings.TrimSpace(v.Path+" "+v.Message))
			}
			rv.verdict.Problem = "invalid review block: " + strings.Join(vs, "; ")
		default:
			rv.verdict.Problem = "invalid review block: " + err.Error()
		}
	}
	logw.Printf("reviewer %d: %s", i, verdictLine(rv.verdict))
	return rv, res.Environment, nil
}

// wireRun is what a reviewer's CLI reported, in the wire form of an
// agent run, without the final text (the verdict and issues stand for it)
// and with its error and warnings redacted.
func wireRun(r agentcli.Result, scrub func(string) string) protocol.AgentRun {
	run := r.AgentRun()
	run.Text, run.Error = "", scrub(run.Error)
	for i, w := range run.Warnings {
		run.Warnings[i] = scrub(w)
	}
	return run
}

// fillVerdict copies a validated review block into v.
func fillVerdict(v *protocol.ReviewVerdict, o *agentoutput.ReviewOutput) {
	v.Verdict = o.Status
	v.Approved = o.Status == agentoutput.VerdictApproved
	for _, is := range o.Issues {
		v.Issues = append(v.Issues, protocol.ReviewIssue{Severity: is.Severity, File: is.File, Line: is.Line,
			Description: is.Description, Suggestion: is.Suggestion})
	}
	v.Suggestions, v.SecurityConcerns = o.Suggestions, o.SecurityConcerns
}

// verdictLine says in one line what a reviewer decided.
func verdictLine(v protocol.ReviewVerdict) string {
	who := v.Adapter
	if v.Model != "" {
		who += " " + v.Model
	}
	if v.Verdict == "" {
		return fmt.Sprintf("%s: no verdict (counts as a rejection): %s", who, v.Problem)
	}
	return fmt.Sprintf("%s: %s, %d issues", who, v.Verdict, len(v.Issues))
}

// ReviewSummary renders a review's outcome as text (the gate's output):
// the count, then each reviewer's verdict and issues.
func ReviewSummary(res *protocol.ReviewResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d reviewers approved (%d needed)\n", res.Approvals, len(res.Reviewers), res.Required)
	for _, v := range res.Reviewers {
		fmt.Fprintf(&b, "reviewer %d (%s)\n", v.Reviewer, verdictLine(v))
		for _, is := range v.Issues {
			at := is.File
			if at != "" && is.Line > 0 {
				at += ":" + strconv.Itoa(is.Line)
			}
			fmt.Fprintf(&b, "  - [%s] %s %s", is.Severity, at, is.Description)
			if is.Suggestion != "" {
				fmt.Fprintf(&b, " (suggestion: %s)", is.Suggestion)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// cappedBuffer keeps the first limit bytes written to it and drops the
// rest (a reviewer's final record comes last, but a runaway CLI must not
// exhaust the runner's memory; Parse then reports the result missing).
type cappedBuffer struct {
	buf   bytes.Buffer
	limit int
}

// Write implements io.Writer; it never fails.
func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.limit - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (c *cappedBuffer) Bytes() []byte { return c.buf.Bytes() }
