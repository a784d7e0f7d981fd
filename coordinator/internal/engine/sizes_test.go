package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// A submission to a full event log is refused with a message that says
// the log is full and names the flag that raises its cap; the workflows
// already in the log are kept.
func TestSubmitToFullEventLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{EventsMaxBytes: 16 << 10})
	e.start()
	wf := "name: small\ndefaults:\n  " + agentCmd + "tasks:\n  - id: n\n    prompt: " + strings.Repeat("p", 2000) + "\n"
	var first string
	var err error
	for i := 0; i < 50; i++ {
		var res api.SubmitResponse
		res, err = e.client.Submit(testkit.Context(t, 20*time.Second), api.SubmitRequest{
			Filename: "wf.yaml", YAML: wf, Repo: e.repo, RepoPath: e.repoDir})
		if err != nil {
			break
		}
		if first == "" {
			first = res.WorkflowID
		}
	}
	var ae *api.Error
	if !errors.As(err, &ae) || !strings.Contains(ae.Description, "event log full") ||
		!strings.Contains(ae.Description, "--events-max-bytes") {
		t.Fatalf("submitting to a 16 KiB event log until it is full: %v; want a refusal saying the log is full", err)
	}
	if first == "" {
		t.Fatal("the first submission was refused already")
	}
	if s := e.status(first); s.Status != protocol.WorkflowRunning {
		t.Errorf("the first workflow is %s once the log is full; want it kept, running", s.Status)
	}
}
