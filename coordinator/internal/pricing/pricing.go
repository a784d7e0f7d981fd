// Package pricing estimates what an agent run cost from the tokens its
// CLI reported, with the operator's price table, for the CLIs that report
// tokens but no cost (Codex, Gemini CLI). The coordinator estimates when
// it takes in an agent's report, before the report becomes an event, so
// a replay needs no price table and sees the same cost.
package pricing

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cast"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Price is what a model's tokens cost, in US dollars per million tokens.
type Price struct {
	Input       float64
	CachedInput float64
	Output      float64
}

// Table holds prices by model name. A model is priced by its own entry,
// else by the longest entry that is a prefix of it followed by "-" (an
// entry "gpt-5" prices "gpt-5-2025-08-07", not "gpt-50").
type Table map[string]Price

// Lookup returns the price of model.
func (t Table) Lookup(model string) (Price, bool) {
	if p, ok := t[model]; ok {
		return p, true
	}
	best, found := "", false
	for name := range t {
		if strings.HasPrefix(model, name+"-") && len(name) > len(best) {
			best, found = name, true
		}
	}
	return t[best], found
}

// Estimate sets run's cost from its usage when its CLI reported none and
// the table prices its model (model, when run names none: the model the
// task asked for). It returns whether it did; the cost is then marked
// estimated. A run that names several models (comma-separated) is priced
// at the first one the table knows.
func (t Table) Estimate(run *protocol.AgentRun, model string) bool {
	if run == nil || run.CostKnown || len(t) == 0 {
		return false
	}
	if run.Model != "" {
		model = run.Model
	}
	for _, m := range strings.Split(model, ",") {
		p, ok := t.Lookup(strings.TrimSpace(m))
		if !ok {
			continue
		}
		u := run.Usage
		fresh := max(u.Input-u.CachedInput, 0)
		run.CostUSD = (float64(fresh)*p.Input + float64(u.CachedInput)*p.CachedInput + float64(u.Output)*p.Output) / 1e6
		run.CostKnown, run.CostEstimated = true, true
		return true
	}
	return false
}

// priceKeys are the keys of one entry of a price list.
var priceKeys = []string{"model", "input", "cached_input", "output"}

// Parse reads a price list as a configuration file holds it:
//
//	prices:
//	  - {model: gpt-5-codex, input: 1.25, cached_input: 0.125, output: 10}
//
// (a list, not a mapping, so model names may hold dots). cached_input
// defaults to input. Errors name the entry and the key.
func Parse(v any) (Table, error) {
	if v == nil {
		return nil, nil
	}
	items, err := cast.ToSliceE(v)
	if err != nil {
		return nil, fmt.Errorf("prices must be a list of {%s}", strings.Join(priceKeys, ", "))
	}
	t := make(Table, len(items))
	for i, item := range items {
		m, err := cast.ToStringMapE(item)
		if err != nil {
			return nil, fmt.Errorf("prices[%d] must be a mapping of %s", i, strings.Join(priceKeys, ", "))
		}
		model := cast.ToString(m["model"])
		if model == "" {
			return nil, fmt.Errorf("prices[%d] has no model", i)
		}
		if _, dup := t[model]; dup {
			return nil, fmt.Errorf("prices[%d]: model %q is listed twice", i, model)
		}
		var p Price
		cached := false
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			var f *float64
			switch k {
			case "model":
				continue
			case "input":
				f = &p.Input
			case "cached_input":
				f, cached = &p.CachedInput, true
			case "output":
				f = &p.Output
			default:
				return nil, fmt.Errorf("prices[%d] (%s): unknown key %q (known: %s)", i, model, k, strings.Join(priceKeys, ", "))
			}
			if *f, err = cast.ToFloat64E(m[k]); err != nil || *f < 0 {
				return nil, fmt.Errorf("prices[%d] (%s): %s must be a number of US dollars per million tokens, not %v", i, model, k, m[k])
			}
		}
		if !cached {
			p.CachedInput = p.Input
		}
		t[model] = p
	}
	return t, nil
}
