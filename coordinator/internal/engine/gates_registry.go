package engine

// The gate registry and node-level gate changes (coordinator gate
// list|add|update|remove).
//
// The registry is the JetStream KV bucket protocol.BucketGates: key = gate
// name, value = the gate as protocol.GateSpec JSON, validated by the one
// gate schema (shared/gates) before it is stored. It is the fleet-wide
// "user config" layer of DESIGN decision 5, read afresh at every
// submission so every coordinator sees every change at once. The order of
// the gate sources of a submission is therefore
//
//	built-in sets < the coordinator's user file (Options.Gates)
//	  < the registry < the project (trusted) < workflow < task
//
// where a later definition replaces the whole gate of its name. The
// registry comes after the user file: both are fleet/user level, and the
// registry is the one every coordinator of the fleet shares and the one
// `gate add|update` changes, so what an operator just stored is what runs.
// Only registry gates can be removed; a built-in or user gate is
// overridden by adding (--replace) or updating a gate of its name, and
// removing that registry gate brings the original back.
//
// A node's own gates change through node.gates_changed events, folded like
// every other state change: the node's task gets the gate definition (as
// if its prompt's front matter had it) or loses the gate, and its gate
// plan is recomputed in dependency layers. The change applies from the
// node's next gate round: a gating node has an added gate dispatched by
// the scheduler in its layer; a node that has finished is refused (409).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Default names of the definition text in problems.
const (
	gateAddFile    = "gate add"
	gateUpdateFile = "gate update"
)

// regGate is one registry entry.
type regGate struct {
	spec protocol.GateSpec
	rev  uint64
}

// registryDefinedAt is the DefinedAt (and GateSpec.Source) of a registry gate.
func registryDefinedAt(name string) string { return protocol.BucketGates + "/" + name }

func (e *Engine) registryKV() (jetstream.KeyValue, error) {
	if e.bus.Gates == nil {
		return nil, &api.Error{Code: api.CodeInternal, Description: fmt.Sprintf(
			"the gate registry (key-value bucket %s) is not open on this coordinator", protocol.BucketGates)}
	}
	return e.bus.Gates, nil
}

// loadRegistry reads every registry gate: one watch of the whole bucket,
// cheap enough for every submission. Entries that do not decode (written
// by hand) are skipped with a warning.
func (e *Engine) loadRegistry(ctx context.Context) (map[string]regGate, error) {
	kv, err := e.registryKV()
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("gate registry: %w", err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]regGate{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gate registry: %w", ctx.Err())
		case ent, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("gate registry: watch closed")
			}
			if ent == nil {
				return out, nil // every current value has been delivered
			}
			if ent.Operation() != jetstream.KeyValuePut {
				delete(out, ent.Key())
				continue
			}
			var spec protocol.GateSpec
			if err := json.Unmarshal(ent.Value(), &spec); err != nil || spec.Name != ent.Key() || len(spec.Command) == 0 {
				e.log.Warn("ignoring an invalid gate registry entry", "bucket", protocol.BucketGates, "key", ent.Key(), "err", err)
				continue
			}
			out[ent.Key()] = regGate{spec: spec, rev: ent.Revision()}
		}
	}
}

// registrySet turns registry entries into gates of the user origin (the
// registry is the fleet's user-level source).
func registrySet(reg map[string]regGate) *gates.Set {
	s := &gates.Set{}
	for name, r := range reg {
		g := gates.FromSpec(r.spec)
		g.Source = gates.Source{Origin: gates.OriginUser, File: registryDefinedAt(name)}
		s.Add(g)
	}
	return s
}

// registryGates returns the registry as a gate set, for submissions:
// the layer between the coordinator's own sources and the project.
func (e *Engine) registryGates(ctx context.Context) (*gates.Set, error) {
	reg, err := e.loadRegistry(ctx)
	if err != nil {
		return nil, err
	}
	return registrySet(reg), nil
}

// lowerOrigin is the API source of a gate of Options.Gates.
func lowerOrigin(g gates.Gate) string {
	if g.Source.Origin == gates.OriginUser {
		return api.SourceUser
	}
	return api.SourceBuiltin
}

// originWords names a fleet source in messages.
var originWords = map[string]string{api.SourceBuiltin: "built-in", api.SourceUser: "user", api.SourceRegistry: "registry"}

// fleetInfo describes the fleet-level gate name: the registry's when it
// has one, else the coordinator's own.
func (e *Engine) fleetInfo(name string, reg map[string]regGate) (api.GateInfo, bool) {
	low, inLower := e.opts.Gates.Get(name)
	if r, ok := reg[name]; ok {
		info := api.GateInfo{Name: name, Source: api.SourceRegistry, DefinedAt: registryDefinedAt(name),
			Revision: r.rev, Definition: r.spec}
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

// invalid turns a gate validation error into a 422 with its problems.
func invalidGate(what string, err error) error {
	var ve *gates.ValidationError
	if errors.As(err, &ve) {
		return &api.Error{Code: api.CodeInvalid, Description: what + " is invalid", Problems: ve.Problems}
	}
	return &api.Error{Code: api.CodeInvalid, Description: what + ": " + err.Error()}
}

// parseGateText validates one gate definition, YAML or JSON, exactly like
// an entry of a gate file's or workflow's gates list; positions in
// problems are relative to the text, named file. A gate file holding
// exactly one gate (gates: [...]) is accepted too.
func parseGateText(file, text string) (gates.Gate, []string, error) {
	c := gates.NewChecker(file)
	var g gates.Gate
	o := gates.ParseOptions{Origin: gates.OriginUser}
	var root *yaml.Node
	if len(text) > gates.MaxFileSize {
		c.Addf(nil, "definition is %d bytes; a gate definition may be at most %d bytes", len(text), gates.MaxFileSize)
	} else {
		root = c.Decode([]byte(text))
	}
	switch {
	case len(c.Problems) > 0:
	case root == nil:
		c.Addf(nil, "the definition is empty; give one gate, e.g. {name: vet, command: [go, vet, ./...]}")
	case root.Kind == yaml.MappingNode && len(root.Content) == 2 && root.Content[0].Value == "gates":
		list := c.GateList(root.Content[1], "gates", o)
		if len(c.Problems) == 0 && len(list) != 1 {
			c.Addf(root.Content[1], "gates holds %d gates; give exactly one", len(list))
		}
		if len(list) > 0 {
			g = list[0]
		}
	default:
		g, _ = c.Gate(root, nil, o)
	}
	var warnings []string
	for _, w := range c.Warnings {
		warnings = append(warnings, w.String())
	}
	return g, warnings, c.Err()
}

// checkDeps checks g's depends_on against set (which holds g): unknown
// gates, self-dependencies and cycles, at the positions of the text g was
// parsed from.
func checkGateDeps(file string, g gates.Gate, set *gates.Set) error {
	c := gates.NewChecker(file)
	c.CheckDeps([]gates.Gate{g}, set)
	return c.Err()
}

// apiGateList lists the fleet's gates, or one node's.
func (e *Engine) apiGateList(ctx context.Context, data []byte) (any, error) {
	var req api.GateListRequest
	if err := decodeReq(data, &req); err != nil {
		return nil, err
	}
	if req.WorkflowID != "" || req.NodeID != "" {
		e.mu.Lock()
		defer e.mu.Unlock()
		w, n, err := e.nodeOf(req.WorkflowID, req.NodeID)
		if err != nil {
			return nil, err
		}
		return nodeGateList(w, n), nil
	}
	reg, err := e.loadRegistry(ctx)
	if err != nil {
		return nil, err
	}
	names := e.opts.Gates.Names()
	for name := range reg {
		if _, ok := e.opts.Gates.Get(name); !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	out := api.GateListResponse{Gates: []api.GateInfo{}}
	for _, name := range names {
		info, _ := e.fleetInfo(name, reg)
		out.Gates = append(out.Gates, info)
	}
	return out, nil
}

// apiGateAdd adds a gate to the registry or to a node.
func (e *Engine) apiGateAdd(ctx context.Context, data []byte) (any, error) {
	var req api.GateAddRequest
	if err := decodeReq(data, &req); err != nil {
		return nil, err
	}
	file := req.Filename
	if file == "" {
		file = gateAddFile
	}
	if req.WorkflowID != "" || req.NodeID != "" {
		return e.nodeGateAdd(ctx, req, file)
	}
	if req.Optional || req.OnFail != "" {
		return nil, &api.Error{Code: api.CodeBadRequest, Description: "optional and on_fail belong to the task that runs a gate: give them with a node (--task WF/NODE)"}
	}
	if strings.TrimSpace(req.Definition) == "" {
		return nil, &api.Error{Code: api.CodeBadRequest, Description: "give the gate's definition: its name and command at least"}
	}
	g, warnings, err := parseGateText(file, req.Definition)
	if err != nil {
		return nil, invalidGate("gate definition", err)
	}
	if req.Name != "" && req.Name != g.Name {
		return nil, &api.Error{Code: api.CodeBadRequest, Description: fmt.Sprintf("name %q does not match the definition's name %q", req.Name, g.Name)}
	}
	reg, err := e.loadRegistry(ctx)
	if err != nil {
		return nil, err
	}
	cur, exists := e.fleetInfo(g.Name, reg)
	if exists && !req.Replace {
		where := cur.Source
		if cur.DefinedAt != "" {
			where += ", " + cur.DefinedAt
		}
		return nil, &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf(
			"gate %q already exists (%s); pass --replace to redefine it in the registry, or use `gate update %s` to change some of its fields",
			g.Name, where, g.Name)}
	}
	set := gates.Merge(e.opts.Gates, registrySet(reg), gates.NewSet(g))
	if err := checkGateDeps(file, g, set); err != nil {
		return nil, invalidGate("gate definition", err)
	}
	spec := g.Spec()
	spec.Source = registryDefinedAt(g.Name)
	rev, err := e.storeRegistry(ctx, spec, reg)
	if err != nil {
		return nil, err
	}
	resp := api.GateChangeResponse{Action: api.GateAdded, Warnings: warnings}
	if _, inRegistry := reg[g.Name]; inRegistry {
		resp.Action = api.GateReplaced
	}
	reg[g.Name] = regGate{spec: spec, rev: rev}
	resp.Gate, _ = e.fleetInfo(g.Name, reg)
	resp.Note = overrideNote(resp.Gate)
	e.log.Info("registry gate "+resp.Action, "gate", g.Name, "revision", rev)
	return resp, nil
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

// storeRegistry writes a validated gate: an update of the revision read
// (so concurrent changes conflict rather than overwrite), or a create.
func (e *Engine) storeRegistry(ctx context.Context, spec protocol.GateSpec, reg map[string]regGate) (uint64, error) {
	kv, err := e.registryKV()
	if err != nil {
		return 0, err
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return 0, err
	}
	var rev uint64
	if cur, ok := reg[spec.Name]; ok {
		rev, err = kv.Update(ctx, spec.Name, data, cur.rev)
	} else {
		rev, err = kv.Create(ctx, spec.Name, data)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf(
			"gate %q was changed in the registry meanwhile; look at it again (gate list) and retry", spec.Name)}
	}
	if err != nil {
		return 0, fmt.Errorf("gate registry: store %s: %w", spec.Name, err)
	}
	return rev, nil
}

// apiGateUpdate changes some fields of a registry or node gate.
func (e *Engine) apiGateUpdate(ctx context.Context, data []byte) (any, error) {
	var req api.GateUpdateRequest
	if err := decodeReq(data, &req); err != nil {
		return nil, err
	}
	if req.Name == "" {
		return nil, &api.Error{Code: api.CodeBadRequest, Description: "name the gate to update"}
	}
	if len(req.Set) == 0 && len(req.Unset) == 0 {
		return nil, &api.Error{Code: api.CodeBadRequest, Description: "nothing to change: give at least one field (--timeout, --max-retries …)"}
	}
	if _, ok := req.Set["name"]; ok || listHas(req.Unset, "name") {
		return nil, &api.Error{Code: api.CodeBadRequest, Description: "a gate's name cannot change: add the gate under the new name and remove the old one"}
	}
	if req.WorkflowID != "" || req.NodeID != "" {
		return e.nodeGateUpdate(ctx, req)
	}
	reg, err := e.loadRegistry(ctx)
	if err != nil {
		return nil, err
	}
	cur, ok := e.fleetInfo(req.Name, reg)
	if !ok {
		return nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("no gate %q: add it with `gate add`", req.Name)}
	}
	g, warnings, err := updatedGate(cur.Definition, req)
	if err != nil {
		return nil, err
	}
	set := gates.Merge(e.opts.Gates, registrySet(reg), gates.NewSet(g))
	if err := checkGateDeps(gateUpdateFile, g, set); err != nil {
		return nil, invalidGate("updated gate", err)
	}
	spec := g.Spec()
	spec.Source = registryDefinedAt(g.Name)
	rev, err := e.storeRegistry(ctx, spec, reg)
	if err != nil {
		return nil, err
	}
	reg[g.Name] = regGate{spec: spec, rev: rev}
	resp := api.GateChangeResponse{Action: api.GateUpdated, Warnings: warnings}
	resp.Gate, _ = e.fleetInfo(g.Name, reg)
	if cur.Source != api.SourceRegistry {
		resp.Note = fmt.Sprintf("the %s gate was copied to the registry with the changes; %s", originWords[cur.Source], overrideNote(resp.Gate))
	}
	e.log.Info("registry gate updated", "gate", g.Name, "revision", rev)
	return resp, nil
}

// updatedGate applies a partial update to a definition and validates the
// result as a whole, like a definition given to gate add.
func updatedGate(cur protocol.GateSpec, req api.GateUpdateRequest) (gates.Gate, []string, error) {
	fields := specFields(cur)
	keys := make([]string, 0, len(req.Set))
	for k := range req.Set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := jsonValue(req.Set[k])
		if err != nil {
			return gates.Gate{}, nil, &api.Error{Code: api.CodeBadRequest, Description: fmt.Sprintf("field %s: %v", k, err)}
		}
		fields = setField(fields, k, v)
	}
	for _, k := range req.Unset {
		fields = setField(fields, k, nil)
	}
	text, err := api.RenderGate(fields)
	if err != nil {
		return gates.Gate{}, nil, &api.Error{Code: api.CodeBadRequest, Description: err.Error()}
	}
	g, warnings, err := parseGateText(gateUpdateFile, text)
	if err != nil {
		return gates.Gate{}, nil, invalidGate("updated gate", err)
	}
	return g, warnings, nil
}

// fieldAliases are the schema's alternative spellings of a field.
var fieldAliases = map[string][]string{
	"timeout": {"timeout_secs"}, "timeout_secs": {"timeout"},
	"poll_interval": {"poll_interval_secs"}, "poll_interval_secs": {"poll_interval"},
	"max_pending": {"max_pending_secs"}, "max_pending_secs": {"max_pending"},
}

// setField sets (or with a nil value removes) a field, replacing its
// aliases; the order of the other fields is kept.
func setField(fields []api.GateField, key string, value any) []api.GateField {
	drop := append([]string{key}, fieldAliases[key]...)
	out := fields[:0:0]
	placed := false
	for _, f := range fields {
		if !listHas(drop, f.Key) {
			out = append(out, f)
			continue
		}
		if value != nil && !placed {
			out = append(out, api.GateField{Key: key, Value: value})
			placed = true
		}
	}
	if value != nil && !placed {
		out = append(out, api.GateField{Key: key, Value: value})
	}
	return out
}

// jsonValue decodes a JSON value for the YAML rendering: integers stay
// integers; null is nil (unset).
func jsonValue(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return normalizeJSON(v), nil
}

func normalizeJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = normalizeJSON(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalizeJSON(x[k])
		}
	}
	return v
}

// specFields writes a wire-form gate back in the gate schema, defaults
// explicit, so it can be edited and validated again.
func specFields(s protocol.GateSpec) []api.GateField {
	f := []api.GateField{{Key: "name", Value: s.Name}}
	add := func(k string, v any) { f = append(f, api.GateField{Key: k, Value: v}) }
	if s.Description != "" {
		add("description", s.Description)
	}
	add("command", s.Command)
	timeout := s.TimeoutSeconds
	if timeout <= 0 {
		timeout = int(gates.DefaultTimeout / time.Second)
	}
	add("timeout", gates.FormatDuration(time.Duration(timeout)*time.Second))
	if len(s.DependsOn) > 0 {
		add("depends_on", s.DependsOn)
	}
	if s.Severity != "" {
		add("severity", s.Severity)
	}
	if len(s.Env) > 0 {
		add("env", s.Env)
	}
	if s.WorkingDir != "" {
		add("working_dir", s.WorkingDir)
	}
	if !s.UsesCache() {
		add("cache", false)
	}
	if len(s.CacheInputs) > 0 {
		add("cache_inputs", s.CacheInputs)
	}
	if s.ForceHashLargeCacheInputs {
		add("force_hash_large_cache_inputs", true)
	}
	if !s.SkipsOnDependencyFailure() {
		add("skip_on_dependency_failure", false)
	}
	if len(s.AllowedWrites) > 0 {
		add("allowed_writes", s.AllowedWrites)
	}
	if s.AllowShell {
		add("allow_shell", true)
	}
	add("max_retries", s.Retries())
	add("poll_interval", gates.FormatDuration(s.PollInterval()))
	add("max_pending", gates.FormatDuration(s.MaxPending()))
	if s.Image != "" {
		add("image", s.Image)
	}
	if r := s.Resources; r != nil && *r != (protocol.GateResources{}) {
		m := map[string]any{}
		if r.MemoryBytes > 0 {
			m["memory"] = r.MemoryBytes
		}
		if r.CPUs > 0 {
			m["cpus"] = r.CPUs
		}
		if r.PIDs > 0 {
			m["pids"] = r.PIDs
		}
		add("resources", m)
	}
	if s.Pool != "" && s.Pool != protocol.DefaultPool {
		add("pool", s.Pool)
	}
	return f
}

// apiGateRemove removes a registry gate or a node's gate.
func (e *Engine) apiGateRemove(ctx context.Context, data []byte) (any, error) {
	var req api.GateRemoveRequest
	if err := decodeReq(data, &req); err != nil {
		return nil, err
	}
	if req.Name == "" {
		return nil, &api.Error{Code: api.CodeBadRequest, Description: "name the gate to remove"}
	}
	if req.WorkflowID != "" || req.NodeID != "" {
		return e.nodeGateRemove(ctx, req)
	}
	reg, err := e.loadRegistry(ctx)
	if err != nil {
		return nil, err
	}
	r, ok := reg[req.Name]
	if !ok {
		if low, inLower := e.opts.Gates.Get(req.Name); inLower {
			return nil, &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf(
				"gate %q is a %s gate (%s), not a registry gate: only gates added with `gate add` can be removed. "+
					"To change it for the fleet, override it: `gate update %s …` or `gate add --replace`; "+
					"to drop it, edit the coordinator's gate files",
				req.Name, originWords[lowerOrigin(low)], low.Source.String(), req.Name)}
		}
		return nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("no gate %q in the registry", req.Name)}
	}
	old, _ := e.fleetInfo(req.Name, reg)
	delete(reg, req.Name)
	after := gates.Merge(e.opts.Gates, registrySet(reg))
	if _, still := after.Get(req.Name); !still {
		var needers []string
		for _, g := range after.Gates() {
			if listHas(g.DependsOn, req.Name) {
				needers = append(needers, g.Name)
			}
		}
		if len(needers) > 0 {
			return nil, &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf(
				"gate %q is needed by %s (depends_on); remove or update those first", req.Name, strings.Join(needers, ", "))}
		}
	}
	kv, err := e.registryKV()
	if err != nil {
		return nil, err
	}
	if err := kv.Delete(ctx, req.Name, jetstream.LastRevision(r.rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return nil, &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf(
				"gate %q was changed in the registry meanwhile; look at it again (gate list) and retry", req.Name)}
		}
		return nil, fmt.Errorf("gate registry: remove %s: %w", req.Name, err)
	}
	resp := api.GateChangeResponse{Action: api.GateRemoved, Gate: old}
	if now, ok := e.fleetInfo(req.Name, reg); ok {
		resp.Note = fmt.Sprintf("the %s gate of that name (%s) applies again", originWords[now.Source], now.DefinedAt)
	}
	e.log.Info("registry gate removed", "gate", req.Name)
	return resp, nil
}

// nodeOf finds a workflow's node for the gate API. Callers hold e.mu.
func (e *Engine) nodeOf(wf, node string) (*Workflow, *Node, error) {
	if wf == "" || node == "" {
		return nil, nil, &api.Error{Code: api.CodeBadRequest, Description: "name the task as WORKFLOW/NODE"}
	}
	w, ok := e.lookup(wf)
	if !ok {
		return nil, nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("workflow %q not found", wf)}
	}
	n := w.Nodes[node]
	if n == nil {
		return nil, nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("workflow %s has no node %q", w.ID, node)}
	}
	return w, n, nil
}

// changeable refuses gate changes to a node that will run no more gates.
func changeable(w *Workflow, n *Node) error {
	switch {
	case w.CancelRequested || w.Status == protocol.WorkflowCancelled:
		return &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf("workflow %s was cancelled", w.ID)}
	case n.Status.Terminal():
		return &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf(
			"node %s already %s: gate changes apply to a node's next gate round, and a finished node has none", n.ID, n.Status)}
	case w.Status.Terminal():
		return &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf("workflow %s already %s", w.ID, w.Status)}
	}
	return nil
}

// nodeGateInfo describes one gate of a node's plan.
func nodeGateInfo(n *Node, name string, layer int) api.GateInfo {
	spec := n.GateSpecs[name]
	src := api.SourceWorkflow
	for _, d := range n.Task.GateDefs {
		if d.Name == name {
			src = api.SourceTask
		}
	}
	l, req := layer, n.Task.GateRequired(name)
	info := api.GateInfo{Name: name, Source: src, DefinedAt: spec.Source, Definition: spec,
		Layer: &l, Required: &req, OnFail: string(n.OnFail[name])}
	if g := n.Gates[name]; g != nil {
		info.Status = g.Status
	}
	return info
}

// nodeGateList is a node's gates in dispatch order.
func nodeGateList(w *Workflow, n *Node) api.GateListResponse {
	out := api.GateListResponse{WorkflowID: w.ID, NodeID: n.ID, NodeStatus: n.Status, Gates: []api.GateInfo{}}
	layers, _ := workflow.GateLayers(w.Spec.GateDefinitions(n.Task), n.Task.Gates)
	for i, layer := range layers {
		for _, name := range layer {
			out.Gates = append(out.Gates, nodeGateInfo(n, name, i))
		}
	}
	return out
}

func (e *Engine) nodeGateAdd(ctx context.Context, req api.GateAddRequest, file string) (any, error) {
	if req.OnFail != "" {
		if _, ok := gates.ParseFailAction(req.OnFail); !ok {
			return nil, &api.Error{Code: api.CodeBadRequest, Description: fmt.Sprintf(
				"on_fail %q: must be one of block, retry_with_feedback, warn", req.OnFail)}
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
		if g, warnings, err = parseGateText(file, req.Definition); err != nil {
			return nil, invalidGate("gate definition", err)
		}
		if req.Name != "" && req.Name != g.Name {
			return nil, &api.Error{Code: api.CodeBadRequest, Description: fmt.Sprintf("name %q does not match the definition's name %q", req.Name, g.Name)}
		}
		parsed = true
	case req.Name != "":
		reg, err := e.loadRegistry(ctx)
		if err != nil {
			return nil, err
		}
		fleet = gates.Merge(e.opts.Gates, registrySet(reg))
	default:
		return nil, &api.Error{Code: api.CodeBadRequest, Description: "give the gate's definition, or the name of a gate the workflow or the fleet defines"}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	w, n, err := e.nodeOf(req.WorkflowID, req.NodeID)
	if err != nil {
		return nil, err
	}
	if err := changeable(w, n); err != nil {
		return nil, err
	}
	defs := w.Spec.GateDefinitions(n.Task)
	var spec protocol.GateSpec
	if parsed {
		spec = g.Spec()
	} else {
		found := false
		for _, d := range defs {
			if d.Name == req.Name {
				spec, found = d, true
			}
		}
		if !found {
			fg, ok := fleet.Get(req.Name)
			if !ok {
				return nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf(
					"neither workflow %s nor the fleet defines a gate %q; give its definition (--command or --file)", w.ID, req.Name)}
			}
			spec = fg.Spec()
		}
	}
	_, inPlan := n.GateSpecs[spec.Name]
	if inPlan && (!req.Replace || !parsed) {
		return nil, &api.Error{Code: api.CodeConflict, Description: fmt.Sprintf(
			"node %s already runs gate %q; pass --replace with a definition to redefine it for this node, or use `gate update %s --task %s/%s`",
			n.ID, spec.Name, spec.Name, w.ID, n.ID)}
	}
	if parsed {
		// Dependencies must be gates the node can run: the workflow's and
		// the task's own, with the new definition.
		set := &gates.Set{}
		for _, d := range defs {
			set.Add(gates.FromSpec(d))
		}
		set.Add(g)
		if err := checkGateDeps(file, g, set); err != nil {
			return nil, invalidGate("gate definition", err)
		}
	}
	change := &protocol.GateChange{Definition: &spec, Optional: req.Optional, OnFail: strings.ToLower(req.OnFail)}
	resp, err := e.emitGateChange(ctx, w, n, change)
	if err != nil {
		return nil, err
	}
	resp.Action, resp.Warnings = api.GateAdded, warnings
	if inPlan {
		resp.Action = api.GateReplaced
	}
	return resp, nil
}

func (e *Engine) nodeGateUpdate(ctx context.Context, req api.GateUpdateRequest) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, n, err := e.nodeOf(req.WorkflowID, req.NodeID)
	if err != nil {
		return nil, err
	}
	if err := changeable(w, n); err != nil {
		return nil, err
	}
	cur, ok := n.GateSpecs[req.Name]
	if !ok {
		return nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("node %s has no gate %q", n.ID, req.Name)}
	}
	g, warnings, err := updatedGate(cur, req)
	if err != nil {
		return nil, err
	}
	set := &gates.Set{}
	for _, d := range w.Spec.GateDefinitions(n.Task) {
		set.Add(gates.FromSpec(d))
	}
	set.Add(g)
	if err := checkGateDeps(gateUpdateFile, g, set); err != nil {
		return nil, invalidGate("updated gate", err)
	}
	spec := g.Spec()
	resp, err := e.emitGateChange(ctx, w, n, &protocol.GateChange{Definition: &spec})
	if err != nil {
		return nil, err
	}
	resp.Action, resp.Warnings = api.GateUpdated, warnings
	return resp, nil
}

func (e *Engine) nodeGateRemove(ctx context.Context, req api.GateRemoveRequest) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, n, err := e.nodeOf(req.WorkflowID, req.NodeID)
	if err != nil {
		return nil, err
	}
	if err := changeable(w, n); err != nil {
		return nil, err
	}
	if _, ok := n.GateSpecs[req.Name]; !ok {
		return nil, &api.Error{Code: api.CodeNotFound, Description: fmt.Sprintf("node %s has no gate %q", n.ID, req.Name)}
	}
	old := nodeGateInfo(n, req.Name, 0)
	old.Layer = nil
	resp, err := e.emitGateChange(ctx, w, n, &protocol.GateChange{Remove: req.Name})
	if err != nil {
		return nil, err
	}
	resp.Action, resp.Gate = api.GateRemoved, old
	return resp, nil
}

// emitGateChange checks that the change leaves the node a valid gate
// plan, records it and lets the scheduler act on it. Callers hold e.mu.
func (e *Engine) emitGateChange(ctx context.Context, w *Workflow, n *Node, c *protocol.GateChange) (api.GateChangeResponse, error) {
	if _, _, err := w.planGateChange(n, c); err != nil {
		return api.GateChangeResponse{}, &api.Error{Code: api.CodeConflict, Description: err.Error()}
	}
	ev := &protocol.Event{Type: protocol.EvNodeGatesChanged, WorkflowID: w.ID, NodeID: n.ID, Attempt: n.Attempt, GateChange: c}
	if err := e.emit(ctx, ev, ""); err != nil {
		return api.GateChangeResponse{}, err
	}
	name := c.Remove
	if c.Definition != nil {
		name = c.Definition.Name
	}
	e.log.Info("node gates changed", "workflow", w.ID, "node", n.ID, "gate", name, "removed", c.Remove != "")
	e.advance(ctx, w)
	var resp api.GateChangeResponse
	for _, info := range nodeGateList(w, n).Gates {
		if info.Name == name {
			resp.Gate = info
		}
	}
	switch {
	case c.Remove != "":
		resp.Note = fmt.Sprintf("node %s no longer runs it", n.ID)
	case n.Status == protocol.NodeGating:
		resp.Note = fmt.Sprintf("node %s is gating: the gate runs in its dependency layer of the current round", n.ID)
	case n.Status.Terminal():
		resp.Note = fmt.Sprintf("node %s is now %s", n.ID, n.Status)
	default:
		resp.Note = fmt.Sprintf("node %s runs it once its agent succeeds", n.ID)
	}
	return resp, nil
}

// planGateChange computes the task and gate layers a node has after c,
// without changing anything. A removal is refused while another of the
// node's gates depends on the gate.
func (w *Workflow) planGateChange(n *Node, c *protocol.GateChange) (protocol.TaskSpec, [][]string, error) {
	t := cloneTask(n.Task)
	switch {
	case c == nil || (c.Definition == nil) == (c.Remove == ""):
		return t, nil, fmt.Errorf("node.gates_changed for %s/%s must either define or remove one gate", w.ID, n.ID)
	case c.Definition != nil:
		def := *c.Definition
		replaced := false
		for i := range t.GateDefs {
			if t.GateDefs[i].Name == def.Name {
				t.GateDefs[i], replaced = def, true
			}
		}
		if !replaced {
			t.GateDefs = append(t.GateDefs, def)
		}
		if _, inPlan := n.GateSpecs[def.Name]; !inPlan {
			if t.Required == nil && t.Optional == nil {
				t.Required = append([]string{}, t.Gates...) // make the old all-required form explicit
			}
			if c.Optional {
				t.Optional = append(t.Optional, def.Name)
			} else {
				t.Required = append(t.Required, def.Name)
			}
			t.Gates = append(t.Gates, def.Name)
		}
		if c.OnFail != "" {
			if t.OnFail == nil {
				t.OnFail = map[string]string{}
			}
			t.OnFail[def.Name] = c.OnFail
		}
	default:
		name := c.Remove
		t.Gates, t.Required, t.Optional = listWithout(t.Gates, name), listWithout(t.Required, name), listWithout(t.Optional, name)
		// Refused while the gates the node keeps still pull it in.
		if kept, err := workflow.GateLayers(w.Spec.GateDefinitions(t), t.Gates); err == nil {
			var needers []string
			for _, layer := range kept {
				for _, g := range layer {
					if listHas(nodeGateSpec(w, t, g).DependsOn, name) {
						needers = append(needers, g)
					}
				}
			}
			if len(needers) > 0 {
				return t, nil, fmt.Errorf("gate %q of node %s is needed by %s (depends_on); remove those first",
					name, n.ID, strings.Join(needers, ", "))
			}
		}
		defs := t.GateDefs[:0:0]
		for _, d := range t.GateDefs {
			if d.Name != name {
				defs = append(defs, d)
			}
		}
		t.GateDefs = defs
		delete(t.OnFail, name)
	}
	layers, err := workflow.GateLayers(w.Spec.GateDefinitions(t), t.Gates)
	if err != nil {
		return t, nil, fmt.Errorf("node %s: %w", n.ID, err)
	}
	return t, layers, nil
}

func nodeGateSpec(w *Workflow, t protocol.TaskSpec, name string) protocol.GateSpec {
	for _, d := range w.Spec.GateDefinitions(t) {
		if d.Name == name {
			return d
		}
	}
	return protocol.GateSpec{}
}

// applyGateChange folds a node.gates_changed event: the node's task and
// gate plan change; a gate the node no longer runs keeps only its round
// counter (so a gate added again gets new job ids), and a gate added to
// the plan starts afresh, for the scheduler to dispatch in its layer.
func (w *Workflow) applyGateChange(n *Node, c *protocol.GateChange) error {
	t, layers, err := w.planGateChange(n, c)
	if err != nil {
		return err
	}
	before := n.GateSpecs
	byName := map[string]protocol.GateSpec{}
	for _, d := range w.Spec.GateDefinitions(t) {
		byName[d.Name] = d
	}
	n.Task, n.GateOrder = t, nil
	n.GateSpecs, n.OnFail = map[string]protocol.GateSpec{}, map[string]gates.FailAction{}
	for _, layer := range layers {
		n.GateOrder = append(n.GateOrder, layer...)
		for _, g := range layer {
			n.GateSpecs[g] = byName[g]
			n.OnFail[g] = gates.TaskOnFail(t, byName[g])
		}
	}
	for name, g := range n.Gates {
		_, was := before[name]
		_, is := n.GateSpecs[name]
		if was != is {
			g.Dispatched, g.Status, g.Result, g.NoCache, g.published = false, "", nil, false, false
			g.LeaseToken, g.Host, g.PendingSince, g.NextPollAt = 0, "", time.Time{}, time.Time{}
		}
	}
	return nil
}

func cloneTask(t protocol.TaskSpec) protocol.TaskSpec {
	c := t
	c.Gates = listClone(t.Gates)
	c.Required = listClone(t.Required)
	c.Optional = listClone(t.Optional)
	c.GateDefs = append([]protocol.GateSpec(nil), t.GateDefs...)
	if t.OnFail != nil {
		c.OnFail = make(map[string]string, len(t.OnFail))
		for k, v := range t.OnFail {
			c.OnFail[k] = v
		}
	}
	return c
}

func listClone(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}

func listWithout(s []string, name string) []string {
	if s == nil {
		return nil
	}
	out := []string{}
	for _, x := range s {
		if x != name {
			out = append(out, x)
		}
	}
	return out
}

func listHas(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
