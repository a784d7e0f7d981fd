package service

// The gate endpoints (coordinator gate list|add|update|remove): at fleet
// level they read and write the registry (package gateregistry), whose
// gates come after the coordinator's own built-in and user gates in
// precedence; with a workflow and node they change that node's gates
// through the state machine (node.gates_changed events).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/gateregistry"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// Default names of the definition text in problems.
const (
	gateAddFile    = "gate add"
	gateUpdateFile = "gate update"
)

// originWords names a fleet source in messages.
var originWords = map[string]string{api.SourceBuiltin: "built-in", api.SourceUser: "user", api.SourceRegistry: "registry"}

// invalidGate turns a gate validation error into a 422 with its problems.
func invalidGate(what string, err error) error {
	var ve *gates.ValidationError
	if errors.As(err, &ve) {
		return api.Invalid(what+" is invalid", ve.Problems)
	}
	return api.Invalid(what+": "+err.Error(), nil)
}

// updateError maps gateregistry.Update's errors.
func updateError(err error) error {
	var fe *gateregistry.FieldError
	if errors.As(err, &fe) {
		return api.BadRequest("%s", fe.Msg)
	}
	return invalidGate("updated gate", err)
}

// registryError maps the registry's errors.
func registryError(name string, err error) error {
	switch {
	case errors.Is(err, gateregistry.ErrChanged):
		return api.Conflict("gate %q was changed in the registry meanwhile; look at it again (gate list) and retry", name)
	case errors.Is(err, gateregistry.ErrUnavailable):
		return api.Internal("the gate registry (key-value bucket %s) is not open on this coordinator", protocol.BucketGates)
	}
	return err
}

func (s *Service) loadRegistry(ctx context.Context) (map[string]gateregistry.Entry, error) {
	reg, err := s.registry.Load(ctx)
	if err != nil {
		return nil, registryError("", err)
	}
	return reg, nil
}

// lowerOrigin is the API source of a gate of the coordinator's own.
func lowerOrigin(g gates.Gate) string {
	if g.Source.Origin == gates.OriginUser {
		return api.SourceUser
	}
	return api.SourceBuiltin
}

// fleetInfo describes the fleet-level gate name: the registry's when it
// has one, else the coordinator's own.
func (s *Service) fleetInfo(name string, reg map[string]gateregistry.Entry) (api.GateInfo, bool) {
	low, inLower := s.lower.Get(name)
	if r, ok := reg[name]; ok {
		info := api.GateInfo{Name: name, Source: api.SourceRegistry, DefinedAt: gateregistry.DefinedAt(name),
			Revision: r.Revision, Definition: r.Spec}
		if inLower {
			info.Overrides = []string{lowerOrigin(low)}
		}
		return info, true
	}
	if inLower {
		return api.GateInfo{Name: name, Source: lowerOrigin(low), DefinedAt: low.Source.String(), Definition: low.Spec()}, true
	}
	return api.GateInfo{}, false
}

func overrideNote(info api.GateInfo) string {
	if len(info.Overrides) == 0 {
		return "new workflows can use it by name"
	}
	words := make([]string, len(info.Overrides))
	for i, o := range info.Overrides {
		words[i] = originWords[o]
	}
	return fmt.Sprintf("overrides the %s gate of that name for new workflows; removing it from the registry restores that one",
		strings.Join(words, " and "))
}

// gateList lists the fleet's gates, or one node's.
func (s *Service) gateList(ctx context.Context, req api.GateListRequest) (api.GateListResponse, error) {
	if req.WorkflowID != "" || req.NodeID != "" {
		var out api.GateListResponse
		err := s.readNode(ctx, req.WorkflowID, req.NodeID, func(w *statemachine.Workflow, n *statemachine.Node) error {
			out = nodeGateList(w, n)
			return nil
		})
		return out, err
	}
	reg, err := s.loadRegistry(ctx)
	if err != nil {
		return api.GateListResponse{}, err
	}
	names := s.lower.Names()
	for name := range reg {
		if _, ok := s.lower.Get(name); !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	out := api.GateListResponse{Gates: []api.GateInfo{}}
	for _, name := range names {
		info, _ := s.fleetInfo(name, reg)
		out.Gates = append(out.Gates, info)
	}
	return out, nil
}

// gateAdd adds a gate to the registry or to a node.
func (s *Service) gateAdd(ctx context.Context, req api.GateAddRequest) (api.GateChangeResponse, error) {
	var none api.GateChangeResponse
	file := req.Filename
	if file == "" {
		file = gateAddFile
	}
	if req.WorkflowID != "" || req.NodeID != "" {
		return s.nodeGateAdd(ctx, req, file)
	}
	if req.Optional || req.OnFail != "" {
		return none, api.BadRequest("optional and on_fail belong to the task that runs a gate: give them with a node (--task WF/NODE)")
	}
	if strings.TrimSpace(req.Definition) == "" {
		return none, api.BadRequest("give the gate's definition: its name and command at least")
	}
	g, warnings, err := gateregistry.Parse(file, req.Definition)
	if err != nil {
		return none, invalidGate("gate definition", err)
	}
	if req.Name != "" && req.Name != g.Name {
		return none, api.BadRequest("name %q does not match the definition's name %q", req.Name, g.Name)
	}
	reg, err := s.loadRegistry(ctx)
	if err != nil {
		return none, err
	}
	cur, exists := s.fleetInfo(g.Name, reg)
	if exists && !req.Replace {
		where := cur.Source
		if cur.DefinedAt != "" {
			where += ", " + cur.DefinedAt
		}
		return none, api.Conflict("gate %q already exists (%s); pass --replace to redefine it in the registry, or use `gate update %s` to change some of its fields",
			g.Name, where, g.Name)
	}
	spec, rev, err := s.storeGate(ctx, file, "gate definition", g, reg)
	if err != nil {
		return none, err
	}
	resp := api.GateChangeResponse{Action: api.GateAdded, Warnings: warnings}
	if _, inRegistry := reg[g.Name]; inRegistry {
		resp.Action = api.GateReplaced
	}
	reg[g.Name] = gateregistry.Entry{Spec: spec, Revision: rev}
	resp.Gate, _ = s.fleetInfo(g.Name, reg)
	resp.Note = overrideNote(resp.Gate)
	s.log.Info("registry gate "+resp.Action, "gate", g.Name, "revision", rev)
	return resp, nil
}

// storeGate stores g in the registry once its dependencies resolve among
// the fleet's gates (file and what name it in problems), and returns the
// stored definition and its revision; reg is the registry as loaded.
func (s *Service) storeGate(ctx context.Context, file, what string, g gates.Gate, reg map[string]gateregistry.Entry) (protocol.GateSpec, uint64, error) {
	set := gates.Merge(s.lower, gateregistry.Gates(reg), gates.NewSet(g))
	if err := gateregistry.CheckDeps(file, g, set); err != nil {
		return protocol.GateSpec{}, 0, invalidGate(what, err)
	}
	spec := g.Spec()
	spec.Source = gateregistry.DefinedAt(g.Name)
	rev, err := s.registry.Store(ctx, spec, reg)
	if err != nil {
		return protocol.GateSpec{}, 0, registryError(g.Name, err)
	}
	return spec, rev, nil
}

// gateUpdate changes some fields of a registry or node gate.
func (s *Service) gateUpdate(ctx context.Context, req api.GateUpdateRequest) (api.GateChangeResponse, error) {
	var none api.GateChangeResponse
	if req.Name == "" {
		return none, api.BadRequest("name the gate to update")
	}
	if len(req.Set) == 0 && len(req.Unset) == 0 {
		return none, api.BadRequest("nothing to change: give at least one field (--timeout, --max-retries …)")
	}
	if _, ok := req.Set["name"]; ok || slices.Contains(req.Unset, "name") {
		return none, api.BadRequest("a gate's name cannot change: add the gate under the new name and remove the old one")
	}
	if req.WorkflowID != "" || req.NodeID != "" {
		return s.nodeGateUpdate(ctx, req)
	}
	reg, err := s.loadRegistry(ctx)
	if err != nil {
		return none, err
	}
	cur, ok := s.fleetInfo(req.Name, reg)
	if !ok {
		return none, api.NotFound("no gate %q: add it with `gate add`", req.Name)
	}
	g, warnings, err := gateregistry.Update(gateUpdateFile, cur.Definition, req.Set, req.Unset)
	if err != nil {
		return none, updateError(err)
	}
	spec, rev, err := s.storeGate(ctx, gateUpdateFile, "updated gate", g, reg)
	if err != nil {
		return none, err
	}
	reg[g.Name] = gateregistry.Entry{Spec: spec, Revision: rev}
	resp := api.GateChangeResponse{Action: api.GateUpdated, Warnings: warnings}
	resp.Gate, _ = s.fleetInfo(g.Name, reg)
	if cur.Source != api.SourceRegistry {
		resp.Note = fmt.Sprintf("the %s gate was copied to the registry with the changes; %s", originWords[cur.Source], overrideNote(resp.Gate))
	}
	s.log.Info("registry gate updated", "gate", g.Name, "revision", rev)
	return resp, nil
}

// gateRemove removes a registry gate or a node's gate.
func (s *Service) gateRemove(ctx context.Context, req api.GateRemoveRequest) (api.GateChangeResponse, error) {
	var none api.GateChangeResponse
	if req.Name == "" {
		return none, api.BadRequest("name the gate to remove")
	}
	if req.WorkflowID != "" || req.NodeID != "" {
		return s.nodeGateRemove(ctx, req)
	}
	reg, err := s.loadRegistry(ctx)
	if err != nil {
		return none, err
	}
	r, ok := reg[req.Name]
	if !ok {
		if low, inLower := s.lower.Get(req.Name); inLower {
			return none, api.Conflict("gate %q is a %s gate (%s), not a registry gate: only gates added with `gate add` can be removed. "+
				"To change it for the fleet, override it: `gate update %s …` or `gate add --replace`; "+
				"to drop it, edit the coordinator's gate files",
				req.Name, originWords[lowerOrigin(low)], low.Source.String(), req.Name)
		}
		return none, api.NotFound("no gate %q in the registry", req.Name)
	}
	old, _ := s.fleetInfo(req.Name, reg)
	delete(reg, req.Name)
	after := gates.Merge(s.lower, gateregistry.Gates(reg))
	if _, still := after.Get(req.Name); !still {
		var needers []string
		for _, g := range after.Gates() {
			if slices.Contains(g.DependsOn, req.Name) {
				needers = append(needers, g.Name)
			}
		}
		if len(needers) > 0 {
			return none, api.Conflict("gate %q is needed by %s (depends_on); remove or update those first", req.Name, strings.Join(needers, ", "))
		}
	}
	if err := s.registry.Delete(ctx, req.Name, r.Revision); err != nil {
		return none, registryError(req.Name, err)
	}
	resp := api.GateChangeResponse{Action: api.GateRemoved, Gate: old}
	if now, ok := s.fleetInfo(req.Name, reg); ok {
		resp.Note = fmt.Sprintf("the %s gate of that name (%s) applies again", originWords[now.Source], now.DefinedAt)
	}
	s.log.Info("registry gate removed", "gate", req.Name)
	return resp, nil
}

// readNode calls fn with a workflow's node, read-locked.
func (s *Service) readNode(ctx context.Context, wf, node string, fn func(*statemachine.Workflow, *statemachine.Node) error) error {
	if wf == "" || node == "" {
		return api.BadRequest("name the task as WORKFLOW/NODE")
	}
	return s.readWorkflow(ctx, wf, func(w *statemachine.Workflow) error {
		n := w.Nodes[node]
		if n == nil {
			return api.NotFound("workflow %s has no node %q", w.ID, node)
		}
		return fn(w, n)
	})
}

// changeNodeGates runs a gate change on a node: plan builds the change
// from the node's state (or refuses it), the state machine checks that the
// node can take it, the engine records it and decides the workflow again.
// The reply describes the gate as the node now has it.
func (s *Service) changeNodeGates(ctx context.Context, wf, node string,
	plan func(*statemachine.Workflow, *statemachine.Node) (eventlog.GateChange, error)) (api.GateChangeResponse, error) {
	var none api.GateChangeResponse
	if wf == "" || node == "" {
		return none, api.BadRequest("name the task as WORKFLOW/NODE")
	}
	var change eventlog.GateChange
	var tp string
	err := s.wfs.Command(ctx, wf, func(w *statemachine.Workflow, now time.Time) ([]statemachine.Effect, error) {
		n := w.Nodes[node]
		if n == nil {
			return nil, api.NotFound("workflow %s has no node %q", w.ID, node)
		}
		if err := statemachine.Changeable(w, n); err != nil {
			return nil, err
		}
		c, err := plan(w, n)
		if err != nil {
			return nil, err
		}
		tp = w.TraceParent
		ev, err := statemachine.ChangeGates(w, n, c, now)
		if err != nil {
			return nil, err
		}
		change = c
		return []statemachine.Effect{ev}, nil
	})
	if err != nil {
		return none, refusal(err)
	}
	name := change.Remove
	if change.Definition != nil {
		name = change.Definition.Name
	}
	s.log.InfoContext(telemetry.WithTraceParent(ctx, tp), "node gates changed", "workflow", wf, "node", node, "gate", name, "removed", change.Remove != "")
	var resp api.GateChangeResponse
	err = s.readNode(ctx, wf, node, func(w *statemachine.Workflow, n *statemachine.Node) error {
		for _, info := range nodeGateList(w, n).Gates {
			if info.Name == name {
				resp.Gate = info
			}
		}
		switch {
		case change.Remove != "":
			resp.Note = fmt.Sprintf("node %s no longer runs it", n.ID)
		case n.Status == protocol.NodeGating:
			resp.Note = fmt.Sprintf("node %s is gating: the gate runs in its dependency layer of the current round", n.ID)
		case n.Status.Terminal():
			resp.Note = fmt.Sprintf("node %s is now %s", n.ID, n.Status)
		default:
			resp.Note = fmt.Sprintf("node %s runs it once its agent succeeds", n.ID)
		}
		return nil
	})
	return resp, err
}

// nodeGates is the set of gates a node can run: the workflow's and the
// task's own, with g added.
func nodeGates(w *statemachine.Workflow, n *statemachine.Node, g gates.Gate) *gates.Set {
	set := &gates.Set{}
	for _, d := range w.Spec.GateDefinitions(*n.Task) {
		set.Add(gates.FromSpec(d))
	}
	set.Add(g)
	return set
}

func (s *Service) nodeGateAdd(ctx context.Context, req api.GateAddRequest, file string) (api.GateChangeResponse, error) {
	var none api.GateChangeResponse
	if req.OnFail != "" {
		if _, ok := gates.ParseFailAction(req.OnFail); !ok {
			return none, api.BadRequest("on_fail %q: must be one of block, retry_with_feedback, warn", req.OnFail)
		}
	}
	var (
		g        gates.Gate
		parsed   bool
		warnings []string
		fleet    *gates.Set
	)
	switch {
	case strings.TrimSpace(req.Definition) != "":
		var err error
		if g, warnings, err = gateregistry.Parse(file, req.Definition); err != nil {
			return none, invalidGate("gate definition", err)
		}
		if req.Name != "" && req.Name != g.Name {
			return none, api.BadRequest("name %q does not match the definition's name %q", req.Name, g.Name)
		}
		parsed = true
	case req.Name != "":
		reg, err := s.loadRegistry(ctx)
		if err != nil {
			return none, err
		}
		fleet = gates.Merge(s.lower, gateregistry.Gates(reg))
	default:
		return none, api.BadRequest("give the gate's definition, or the name of a gate the workflow or the fleet defines")
	}
	inPlan := false
	resp, err := s.changeNodeGates(ctx, req.WorkflowID, req.NodeID, func(w *statemachine.Workflow, n *statemachine.Node) (eventlog.GateChange, error) {
		var spec protocol.GateSpec
		if parsed {
			spec = g.Spec()
		} else {
			found := false
			for _, d := range w.Spec.GateDefinitions(*n.Task) {
				if d.Name == req.Name {
					spec, found = d, true
				}
			}
			if !found {
				fg, ok := fleet.Get(req.Name)
				if !ok {
					return eventlog.GateChange{}, api.NotFound(
						"neither workflow %s nor the fleet defines a gate %q; give its definition (--command or --file)", w.ID, req.Name)
				}
				spec = fg.Spec()
			}
		}
		_, inPlan = n.GateSpecs()[spec.Name]
		if inPlan && (!req.Replace || !parsed) {
			return eventlog.GateChange{}, api.Conflict(
				"node %s already runs gate %q; pass --replace with a definition to redefine it for this node, or use `gate update %s --task %s/%s`",
				n.ID, spec.Name, spec.Name, w.ID, n.ID)
		}
		if parsed {
			// Dependencies must be gates the node can run.
			if err := gateregistry.CheckDeps(file, g, nodeGates(w, n, g)); err != nil {
				return eventlog.GateChange{}, invalidGate("gate definition", err)
			}
		}
		return eventlog.GateChange{Definition: &spec, Optional: req.Optional, OnFail: strings.ToLower(req.OnFail)}, nil
	})
	if err != nil {
		return none, err
	}
	resp.Action, resp.Warnings = api.GateAdded, warnings
	if inPlan {
		resp.Action = api.GateReplaced
	}
	return resp, nil
}

func (s *Service) nodeGateUpdate(ctx context.Context, req api.GateUpdateRequest) (api.GateChangeResponse, error) {
	var warnings []string
	resp, err := s.changeNodeGates(ctx, req.WorkflowID, req.NodeID, func(w *statemachine.Workflow, n *statemachine.Node) (eventlog.GateChange, error) {
		cur, ok := n.GateSpecs()[req.Name]
		if !ok {
			return eventlog.GateChange{}, api.NotFound("node %s has no gate %q", n.ID, req.Name)
		}
		g, warns, err := gateregistry.Update(gateUpdateFile, cur, req.Set, req.Unset)
		if err != nil {
			return eventlog.GateChange{}, updateError(err)
		}
		if err := gateregistry.CheckDeps(gateUpdateFile, g, nodeGates(w, n, g)); err != nil {
			return eventlog.GateChange{}, invalidGate("updated gate", err)
		}
		warnings = warns
		spec := g.Spec()
		return eventlog.GateChange{Definition: &spec}, nil
	})
	if err != nil {
		return api.GateChangeResponse{}, err
	}
	resp.Action, resp.Warnings = api.GateUpdated, warnings
	return resp, nil
}

func (s *Service) nodeGateRemove(ctx context.Context, req api.GateRemoveRequest) (api.GateChangeResponse, error) {
	var old api.GateInfo
	resp, err := s.changeNodeGates(ctx, req.WorkflowID, req.NodeID, func(_ *statemachine.Workflow, n *statemachine.Node) (eventlog.GateChange, error) {
		if _, ok := n.GateSpecs()[req.Name]; !ok {
			return eventlog.GateChange{}, api.NotFound("node %s has no gate %q", n.ID, req.Name)
		}
		old = nodeGateInfo(n, req.Name, 0)
		old.Layer = nil
		return eventlog.GateChange{Remove: req.Name}, nil
	})
	if err != nil {
		return api.GateChangeResponse{}, err
	}
	resp.Action, resp.Gate = api.GateRemoved, old
	return resp, nil
}
