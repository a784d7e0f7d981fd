package gateregistry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// FieldError is a field of an update that cannot be used at all (its
// value is not JSON, the result cannot be rendered); a definition that
// parses but fails validation is a *gates.ValidationError instead.
type FieldError struct{ Msg string }

func (e *FieldError) Error() string { return e.Msg }

// Parse validates one gate definition, YAML or JSON, exactly like
// an entry of a gate file's or workflow's gates list; positions in
// problems are relative to the text, named file. A gate file holding
// exactly one gate (gates: [...]) is accepted too.
func Parse(file, text string) (gates.Gate, []string, error) {
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

// CheckDeps checks g's depends_on against set (which holds g): unknown
// gates, self-dependencies and cycles, at the positions of the text g was
// parsed from.
func CheckDeps(file string, g gates.Gate, set *gates.Set) error {
	c := gates.NewChecker(file)
	c.CheckDeps([]gates.Gate{g}, set)
	return c.Err()
}

// Update applies a partial update to a definition — set maps schema fields
// to JSON values, unset lists fields that go back to their defaults — and
// validates the result as a whole, like a definition given to gate add.
// file names the rendered definition in problems.
func Update(file string, cur protocol.GateSpec, set map[string]json.RawMessage, unset []string) (gates.Gate, []string, error) {
	fields := specFields(cur)
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := jsonValue(set[k])
		if err != nil {
			return gates.Gate{}, nil, &FieldError{Msg: fmt.Sprintf("field %s: %v", k, err)}
		}
		fields = setField(fields, k, v)
	}
	for _, k := range unset {
		fields = setField(fields, k, nil)
	}
	text, err := api.RenderGate(fields)
	if err != nil {
		return gates.Gate{}, nil, &FieldError{Msg: err.Error()}
	}
	return Parse(file, text)
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
		if !slices.Contains(drop, f.Key) {
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
	if len(s.CacheDirs) > 0 {
		add("cache_dirs", s.CacheDirs)
	}
	return f
}
