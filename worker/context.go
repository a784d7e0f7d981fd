package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// packContext packs the job's context (CTX-01…CTX-07) from the prepared
// workspace, before the agent runs, and returns the job the agent runs: a
// copy whose prompt is the packed context followed by the task
// (contextpack.Packed.Prompt). The prompt the agent is given and the
// manifest of what was packed and dropped are stored in the logs bucket
// as <wf>/<node>/a<attempt>/context-<token>.md and .json, so a human can
// read exactly what the agent saw; the .md name is returned. A job without
// a context comes back unchanged with no name.
//
// A context that cannot fit its budget ends the job with an error (its
// node escalates: another round would not fit either) and no agent run;
// that outcome is returned as stop.
func (w *Worker) packContext(ctx context.Context, job *protocol.AgentJob, token uint64, ws *workspace.Workspace,
	logw *jobrun.LogWriter) (_ *protocol.AgentJob, artifact string, stop *jobrun.Outcome) {

	if job.Context == nil {
		return job, "", nil
	}
	started := time.Now()
	packed, err := contextpack.Pack(ctx, contextpack.Request{Dir: ws.Dir, Git: ws.Git(), Base: job.Repo.BaseCommit,
		Spec: *job.Context, Task: job.Prompt})
	if err != nil {
		var tooLarge *contextpack.TooLargeError
		var invalid *contextpack.DefinitionError
		if !errors.As(err, &tooLarge) && !errors.As(err, &invalid) {
			// git or the file system failed here: another delivery may work.
			return nil, "", &jobrun.Outcome{Err: fmt.Errorf("pack context: %w", err), Repo: jobrun.Broke}
		}
		logw.Printf("cannot pack the context: %v", err)
		logName := fmt.Sprintf("%s/%s/a%d/agent-%d.log", job.WorkflowID, job.NodeID, job.Attempt, token)
		if uerr := jobrun.UploadLog(ctx, w.deps.Bus, logName, []byte(w.creds.Scrub(string(logw.Bytes())))); uerr != nil {
			return nil, "", &jobrun.Outcome{Err: uerr}
		}
		return nil, "", &jobrun.Outcome{Repo: jobrun.Worked, Report: &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
			JobID: job.JobID, WorkflowID: job.WorkflowID, NodeID: job.NodeID, Attempt: job.Attempt,
			LeaseToken: token, Host: w.deps.Host, Status: protocol.AgentError, ExitCode: -1, Log: logName,
			Error: "pack context: " + err.Error(), StartedAt: started.UTC(), FinishedAt: time.Now().UTC(),
		}}}
	}
	prompt := packed.Prompt(job.Prompt)
	base := fmt.Sprintf("%s/%s/a%d/context-%d", job.WorkflowID, job.NodeID, job.Attempt, token)
	manifest, err := json.MarshalIndent(packed.Manifest, "", "  ")
	if err != nil {
		return nil, "", &jobrun.Outcome{Err: fmt.Errorf("pack context: manifest: %w", err)}
	}
	if err := jobrun.UploadLog(ctx, w.deps.Bus, base+".md", []byte(prompt)); err != nil {
		return nil, "", &jobrun.Outcome{Err: err}
	}
	if err := jobrun.UploadLog(ctx, w.deps.Bus, base+".json", append(manifest, '\n')); err != nil {
		return nil, "", &jobrun.Outcome{Err: err}
	}
	logw.Printf("context %s: %s", base+".md", summary(packed.Manifest))
	run := *job
	run.Prompt = prompt
	return &run, base + ".md", nil
}

// summary is the manifest in one log line.
func summary(m contextpack.Manifest) string {
	var parts []string
	for _, p := range m.Parts {
		switch {
		case p.Included:
			parts = append(parts, fmt.Sprintf("%s %d", p.Name, p.Tokens))
		case p.Reason == "empty":
			parts = append(parts, p.Name+" empty")
		default:
			parts = append(parts, p.Name+" dropped")
		}
	}
	counted := m.Encoding
	if m.Estimated {
		counted += ", partly estimated"
	}
	return fmt.Sprintf("strategy %s, %d of %d tokens (%s; task %d): %s", m.Strategy, m.Tokens, m.Budget, counted, m.TaskTokens,
		strings.Join(parts, ", "))
}

// withContext records the packed context's artifact on the agent's result.
func withContext(out jobrun.Outcome, artifact string) jobrun.Outcome {
	if artifact != "" && out.Report != nil && out.Report.Agent != nil {
		out.Report.Agent.Context = artifact
	}
	return out
}
