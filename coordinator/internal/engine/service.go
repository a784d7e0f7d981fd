package engine

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// ServiceVersion is reported by the micro service's info endpoint.
const ServiceVersion = "0.1.0"

// logTailBytes caps each log returned by the logs endpoint, so a reply
// stays under NATS's default 1 MiB message limit.
const logTailBytes = 192 << 10

func (e *Engine) serveAPI() (micro.Service, error) {
	svc, err := micro.AddService(e.bus.NC, micro.Config{
		Name:        "supervisor",
		Version:     ServiceVersion,
		Description: "Supervisor coordinator: submit, status, list, cancel and logs of workflows; gates",
		Metadata:    map[string]string{"coordinator": e.opts.ID},
	})
	if err != nil {
		return nil, fmt.Errorf("engine: start API service: %w", err)
	}
	g := svc.AddGroup(protocol.APIPrefix)
	endpoints := map[string]func(context.Context, []byte) (any, error){
		protocol.APISubmit:    e.apiSubmit,
		protocol.APIStatus:    e.apiStatus,
		protocol.APIList:      e.apiList,
		protocol.APICancel:    e.apiCancel,
		protocol.APILogs:      e.apiLogs,
		protocol.APIGateRerun: e.apiGateRerun,
		// gates_registry.go
		protocol.APIGateList:   e.apiGateList,
		protocol.APIGateAdd:    e.apiGateAdd,
		protocol.APIGateUpdate: e.apiGateUpdate,
		protocol.APIGateRemove: e.apiGateRemove,
	}
	for name, h := range endpoints {
		h := h
		if err := g.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) { e.serve(r, h) })); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("engine: add endpoint %s: %w", name, err)
		}
	}
	return svc, nil
}

func (e *Engine) serve(r micro.Request, h func(context.Context, []byte) (any, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := h(ctx, r.Data())
	if err != nil {
		var ae *api.Error
		if !errors.As(err, &ae) {
			ae = &api.Error{Code: api.CodeInternal, Description: err.Error()}
			e.log.Error("API request failed", "subject", r.Subject(), "err", err)
		}
		var data []byte
		if len(ae.Problems) > 0 {
			data, _ = json.Marshal(ae.Problems)
		}
		_ = r.Error(fmt.Sprint(ae.Code), oneLine(ae.Description), data)
		return
	}
	_ = r.RespondJSON(out)
}

// oneLine keeps a description header-safe.
func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r", " "), "\n", "; ")
}

func decodeReq(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &api.Error{Code: api.CodeBadRequest, Description: "malformed request: " + err.Error()}
	}
	return nil
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

func (e *Engine) apiSubmit(ctx context.Context, data []byte) (any, error) {
	var req api.SubmitRequest
	if err := decodeReq(data, &req); err != nil {
		return nil, err
	}
	// Gate sources below the project: the coordinator's built-in and user
	// gates, then the fleet's registry, read afresh so every coordinator
	// sees every change (gates_registry.go).
	registry, err := e.registryGates(ctx)
	if err != nil {
		return nil, err
	}
	opts := workflow.Options{BuiltinGates: e.opts.Gates, UserGates: registry}
	if pg := req.ProjectGates; pg != nil {
		gs, _, err := gates.ParseFile(pg.Filename, []byte(pg.Content), gates.OriginProject)
		if err != nil {
			var ve *gates.ValidationError
			if errors.As(err, &ve) {
				return nil, &api.Error{Code: api.CodeInvalid, Description: "project gates are invalid", Problems: ve.Problems}
			}
			return nil, &api.Error{Code: api.CodeInvalid, Description: err.Error()}
		}
		opts.ProjectGates = gates.NewSet(gs...)
	}
	spec, err := workflow.ParseWithOptions(req.Filename, []byte(req.YAML), opts)
	if err != nil {
		var ve *workflow.ValidationError
		if errors.As(err, &ve) {
			return nil, &api.Error{Code: api.CodeInvalid, Description: "workflow is invalid", Problems: ve.Problems}
		}
		return nil, &api.Error{Code: api.CodeInvalid, Description: err.Error()}
	}
	switch {
	case !commitRE.MatchString(req.Repo.BaseCommit):
		return nil, &api.Error{Code: api.CodeBadRequest, Description: fmt.Sprintf("repo.base_commit %q is not a full commit id", req.Repo.BaseCommit)}
	case req.Repo.ID == "" || req.Repo.Bundle == "":
		return nil, &api.Error{Code: api.CodeBadRequest, Description: "repo.id and repo.bundle are required"}
	}
	if _, err := e.bus.Bundles.GetInfo(ctx, req.Repo.Bundle); err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, &api.Error{Code: api.CodeBadRequest, Description: fmt.Sprintf("repository bundle %s is not in bucket %s; upload it before submitting", req.Repo.Bundle, protocol.BucketBundles)}
		}
		return nil, err
	}
	id, err := newWorkflowID()
	if err != nil {
		return nil, err
	}
	repo := req.Repo
	ev := &protocol.Event{Type: protocol.EvWorkflowSubmitted, WorkflowID: id, Workflow: spec, Repo: &repo,
		RepoPath: req.RepoPath, Source: req.Filename}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.emit(ctx, ev, id+".submitted"); err != nil {
		return nil, err
	}
	w := e.wfs[id]
	e.log.Info("workflow submitted", "workflow", id, "name", spec.Name, "tasks", len(spec.Tasks), "source", req.Filename)
	e.advance(ctx, w)
	return api.SubmitResponse{WorkflowID: id, Branch: w.Branch}, nil
}

// newWorkflowID returns "wf-" and 12 random base-32 characters.
func newWorkflowID() (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "wf-" + string(b[:]), nil
}

func (e *Engine) workflowFor(data []byte) (*Workflow, api.IDRequest, error) {
	var req api.IDRequest
	if err := decodeReq(data, &req); err != nil {
		return nil, req, err
	}
	w, ok := e.lookup(req.WorkflowID)
	if !ok {
		return nil, req, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("workflow %q not found", req.WorkflowID)}
	}
	return w, req, nil
}

func (e *Engine) apiStatus(_ context.Context, data []byte) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, _, err := e.workflowFor(data)
	if err != nil {
		return nil, err
	}
	return w.Summary(true), nil
}

func (e *Engine) apiList(_ context.Context, data []byte) (any, error) {
	var req api.IDRequest
	if err := decodeReq(data, &req); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := api.ListResponse{Workflows: []api.WorkflowSummary{}}
	for _, id := range e.order {
		out.Workflows = append(out.Workflows, e.wfs[id].Summary(false))
	}
	return out, nil
}

func (e *Engine) apiCancel(ctx context.Context, data []byte) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, _, err := e.workflowFor(data)
	if err != nil {
		return nil, err
	}
	if w.Status.Terminal() {
		return nil, &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf("workflow %s already %s", w.ID, w.Status)}
	}
	if !w.CancelRequested {
		ev := &protocol.Event{Type: protocol.EvWorkflowCancelled, WorkflowID: w.ID}
		if err := e.emit(ctx, ev, w.ID+".cancel"); err != nil {
			return nil, err
		}
	}
	e.advance(ctx, w)
	return w.Summary(true), nil
}

func (e *Engine) apiLogs(ctx context.Context, data []byte) (any, error) {
	e.mu.Lock()
	w, req, err := e.workflowFor(data)
	if err != nil {
		e.mu.Unlock()
		return nil, err
	}
	n := w.Nodes[req.NodeID]
	if n == nil {
		e.mu.Unlock()
		return nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("workflow %s has no node %q", w.ID, req.NodeID)}
	}
	var entries []api.LogEntry
	if n.Agent != nil && n.Agent.Log != "" {
		entries = append(entries, api.LogEntry{Name: "agent", Object: n.Agent.Log})
	}
	for _, g := range n.GateOrder {
		if gr := n.Gates[g]; gr != nil && gr.Result != nil && gr.Result.Log != "" {
			entries = append(entries, api.LogEntry{Name: "gate " + g, Object: gr.Result.Log})
		}
	}
	e.mu.Unlock()
	for i := range entries {
		b, err := e.bus.Logs.GetBytes(ctx, entries[i].Object)
		if err != nil {
			entries[i].Content = fmt.Sprintf("(log unavailable: %v)", err)
			continue
		}
		if len(b) > logTailBytes {
			b, entries[i].Truncated = b[len(b)-logTailBytes:], true
		}
		entries[i].Content = string(b)
	}
	return api.LogsResponse{Logs: entries}, nil
}

func (e *Engine) apiGateRerun(ctx context.Context, data []byte) (any, error) {
	var req api.GateRerunRequest
	if err := decodeReq(data, &req); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.lookup(req.WorkflowID)
	if !ok {
		return nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("workflow %q not found", req.WorkflowID)}
	}
	if w.CancelRequested || w.Status == protocol.WorkflowCancelled {
		return nil, &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf("workflow %s was cancelled", w.ID)}
	}
	var targets []*Node
	if req.NodeID != "" {
		n := w.Nodes[req.NodeID]
		if n == nil {
			return nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("workflow %s has no node %q", w.ID, req.NodeID)}
		}
		if !gatesRerunnable(n) {
			return nil, &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf(
				"node %s is %s: only a node whose agent succeeded and that is gating or failed on its gates can rerun gates", n.ID, n.Status)}
		}
		targets = []*Node{n}
	} else {
		for _, id := range w.Order {
			if n := w.Nodes[id]; gatesRerunnable(n) && len(n.GateOrder) > 0 {
				targets = append(targets, n)
			}
		}
		if len(targets) == 0 {
			return nil, &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf("workflow %s has no gating or gate-failed node", w.ID)}
		}
	}
	for _, n := range targets {
		names := n.GateOrder
		if req.Gate != "" {
			if _, ok := n.GateSpecs[req.Gate]; !ok {
				return nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("node %s has no gate %q", n.ID, req.Gate)}
			}
			names = []string{req.Gate}
		}
		if err := e.rerunGates(ctx, w, n, names, req.NoCache); err != nil {
			return nil, err
		}
	}
	e.advance(ctx, w)
	return w.Summary(true), nil
}

// gatesRerunnable reports whether a node's gates may run again: its agent
// succeeded, and it is gating or failed (on its gates).
func gatesRerunnable(n *Node) bool {
	if n.Agent == nil || n.Agent.Status != protocol.AgentSucceeded {
		return false
	}
	return n.Status == protocol.NodeGating || n.Status == protocol.NodeFailed
}

// rerunGates reopens a failed node if needed and discards the named gates'
// outcomes, so the scheduler dispatches them again in dependency layers.
func (e *Engine) rerunGates(ctx context.Context, w *Workflow, n *Node, names []string, noCache bool) error {
	if n.Status == protocol.NodeFailed {
		ev := &protocol.Event{Type: protocol.EvNodeReopened, WorkflowID: w.ID, NodeID: n.ID, Attempt: n.Attempt,
			Reason: "gate rerun requested"}
		if err := e.emit(ctx, ev, ""); err != nil {
			return err
		}
		// Runners drop jobs of finished workflows; this one runs again.
		if err := e.store.CacheDelete(ctx, protocol.WorkflowFinishedKey(w.ID)); err != nil {
			return err
		}
	}
	for _, name := range names {
		g := n.gate(name)
		if g.Dispatched && g.Status == "" {
			continue // running now: its result will do
		}
		ev := &protocol.Event{Type: protocol.EvGateRerun, WorkflowID: w.ID, NodeID: n.ID, Gate: name,
			Attempt: n.Attempt, Round: g.Round, NoCache: noCache}
		if err := e.emit(ctx, ev, ""); err != nil {
			return err
		}
	}
	return nil
}
