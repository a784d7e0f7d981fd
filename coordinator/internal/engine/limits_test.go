package engine

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

const oneTask = "name: limited\ndefaults:\n  " + agentCmd + "tasks:\n  - id: only\n    prompt: hi\n"

// trySubmit submits yaml through c and returns the API's answer.
func (e *env) trySubmit(c *api.Client, yaml string) (string, error) {
	e.t.Helper()
	res, err := c.Submit(testkit.Context(e.t, 20*time.Second), api.SubmitRequest{
		Filename: "wf.yaml", YAML: yaml, Repo: e.repo, RepoPath: e.repoDir})
	return res.WorkflowID, err
}

// wantRefused fails the test unless err is the API error target whose
// message names flag.
func wantRefused(t *testing.T, err error, target *api.Error, flag string) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) || !errors.Is(err, target) {
		t.Fatalf("err = %v; want a %d", err, target.Code)
	}
	if !strings.Contains(ae.Description, flag) {
		t.Errorf("message %q does not name %s", ae.Description, flag)
	}
}

// LIM-24: a client's submissions past --submit-rate within the window are
// refused with a 429 naming the flag; another client (connection) has its
// own budget; once the window has passed, the first is accepted again.
func TestSubmitRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	// The limiter's clock, moved by the test, so the burst is within the
	// window however slow the machine.
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	e.start(startOptions{limits: service.Limits{SubmitRate: 2, SubmitWindow: time.Minute, Now: clock}})
	for i := range 2 {
		if _, err := e.trySubmit(e.client, oneTask); err != nil {
			t.Fatalf("submission %d within the rate: %v", i+1, err)
		}
	}
	_, err := e.trySubmit(e.client, oneTask)
	wantRefused(t, err, api.ErrTooMany, "--submit-rate")

	nc, err := nats.Connect(e.b.NC.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := e.trySubmit(&api.Client{NC: nc}, oneTask); err != nil {
		t.Errorf("another client's submission: %v", err)
	}

	now.Add(int64(59 * time.Second))
	_, err = e.trySubmit(e.client, oneTask)
	wantRefused(t, err, api.ErrTooMany, "--submit-rate")
	now.Add(int64(time.Second))
	if _, err := e.trySubmit(e.client, oneTask); err != nil {
		t.Errorf("after the window: %v", err)
	}
}

// LIM-25: a request over --max-request-bytes is refused with a 413 naming
// the flag, before it is decoded; one within it is accepted.
func TestRequestSizeLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start(startOptions{limits: service.Limits{MaxRequestBytes: 4096}})
	padded := oneTask + "# " + strings.Repeat("x", 8192) + "\n"
	_, err := e.trySubmit(e.client, padded)
	wantRefused(t, err, api.ErrTooLarge, "--max-request-bytes")
	if _, err := e.trySubmit(e.client, oneTask); err != nil {
		t.Errorf("a small submission: %v", err)
	}
}

// LIM-26, LIM-27: with as many workflows in flight as
// --max-workflows-in-flight allows, or nodes as --max-nodes-in-flight
// does, a new submission is refused with a 503 naming the flag; once a
// workflow has finished (here: cancelled), it is accepted.
func TestInFlightLimits(t *testing.T) {
	t.Parallel()
	t.Run("Workflows", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, bus.Config{})
		e.start(startOptions{limits: service.Limits{MaxWorkflowsInFlight: 2}})
		a := e.submit(oneTask)
		e.submit(oneTask)
		_, err := e.trySubmit(e.client, oneTask)
		wantRefused(t, err, api.ErrUnavailable, "--max-workflows-in-flight")
		if _, err := e.client.Cancel(testkit.Context(t, 20*time.Second), a); err != nil {
			t.Fatal(err)
		}
		e.waitWorkflow(a, protocol.WorkflowCancelled)
		if _, err := e.trySubmit(e.client, oneTask); err != nil {
			t.Errorf("after one finished: %v", err)
		}
	})
	t.Run("Nodes", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, bus.Config{})
		e.start(startOptions{limits: service.Limits{MaxNodesInFlight: 3}})
		twoTasks := oneTask + "  - id: second\n    prompt: hi\n"
		a := e.submit(twoTasks)
		_, err := e.trySubmit(e.client, twoTasks)
		wantRefused(t, err, api.ErrUnavailable, "--max-nodes-in-flight")
		if _, err := e.trySubmit(e.client, oneTask); err != nil {
			t.Errorf("a workflow that fits: %v", err)
		}
		if _, err := e.client.Cancel(testkit.Context(t, 20*time.Second), a); err != nil {
			t.Fatal(err)
		}
		e.waitWorkflow(a, protocol.WorkflowCancelled)
		if _, err := e.trySubmit(e.client, twoTasks); err != nil {
			t.Errorf("after one finished: %v", err)
		}
	})
}

// SIZE-05: a submission naming a repository bundle over --max-bundle-bytes
// is refused with a 413 naming the flag; within it, accepted.
func TestBundleSizeLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	info, err := e.b.Bundles.GetInfo(testkit.Context(t, 10*time.Second), e.repo.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	e.start(startOptions{limits: service.Limits{MaxBundleBytes: int64(info.Size) - 1}})
	_, err = e.trySubmit(e.client, oneTask)
	wantRefused(t, err, api.ErrTooLarge, "--max-bundle-bytes")

	e2 := newEnv(t, bus.Config{})
	info2, err := e2.b.Bundles.GetInfo(testkit.Context(t, 10*time.Second), e2.repo.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	e2.start(startOptions{limits: service.Limits{MaxBundleBytes: int64(info2.Size)}})
	if _, err := e2.trySubmit(e2.client, oneTask); err != nil {
		t.Errorf("a bundle of exactly the limit: %v", err)
	}
}
