package cli

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cast"

	"github.com/supervisorhq/supervisor/coordinator/internal/pricing"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// retryPolicyKeys are the keys of one policy under retry_policies.
var retryPolicyKeys = []string{"max_attempts", "initial_delay", "multiplier", "max_delay", "jitter"}

// loadRetryPolicies reads the operator's retry policies from the config
// file's retry_policies section (RETRY-08):
//
//	retry_policies:
//	  patient: {max_attempts: 4, initial_delay: 10s, multiplier: 2, max_delay: 5m, jitter: 0.2}
//
// A name of a built-in policy replaces it. Bad entries are an error that
// names the policy and the key.
func (e *env) loadRetryPolicies() (map[string]protocol.RetryPolicy, error) {
	raw := e.v.GetStringMap("retry_policies")
	if len(raw) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(raw))
	for n := range raw {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make(map[string]protocol.RetryPolicy, len(raw))
	for _, name := range names {
		pol, err := retryPolicy(name, raw[name])
		if err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("config retry_policies.%s: %w", name, err)}
		}
		out[name] = pol
	}
	return out, nil
}

func retryPolicy(name string, v any) (protocol.RetryPolicy, error) {
	if !protocol.ValidName(name) {
		return protocol.RetryPolicy{}, fmt.Errorf("%q is not a valid name (lower-case letters, digits, - and _)", name)
	}
	m, err := cast.ToStringMapE(v)
	if err != nil {
		return protocol.RetryPolicy{}, fmt.Errorf("must be a mapping of %s", strings.Join(retryPolicyKeys, ", "))
	}
	pol := protocol.RetryPolicy{Name: name, Multiplier: 1}
	for k, val := range m {
		switch k {
		case "max_attempts":
			pol.MaxAttempts, err = cast.ToIntE(val)
		case "initial_delay":
			pol.InitialDelay, err = duration(val)
		case "max_delay":
			pol.MaxDelay, err = duration(val)
		case "multiplier":
			pol.Multiplier, err = cast.ToFloat64E(val)
		case "jitter":
			pol.Jitter, err = cast.ToFloat64E(val)
		default:
			return pol, fmt.Errorf("unknown key %q (known: %s)", k, strings.Join(retryPolicyKeys, ", "))
		}
		if err != nil {
			return pol, fmt.Errorf("%s: %w", k, err)
		}
	}
	return pol, pol.Validate()
}

// loadPrices reads the price table of the config file's prices section,
// which estimates the cost of agent runs whose CLI reports none:
//
//	prices:
//	  - {model: gpt-5-codex, input: 1.25, cached_input: 0.125, output: 10}
//
// (US dollars per million tokens). A bad entry is a usage error naming it.
func (e *env) loadPrices() (pricing.Table, error) {
	t, err := pricing.Parse(e.v.Get("prices"))
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("config %w", err)}
	}
	return t, nil
}

// duration reads a Go duration ("90s") or a number of seconds.
func duration(v any) (time.Duration, error) {
	if s, ok := v.(string); ok {
		return time.ParseDuration(s)
	}
	secs, err := cast.ToFloat64E(v)
	return time.Duration(secs * float64(time.Second)), err
}
