package protocol

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"time"
)

// DefaultMaxAttempts is a task's budget of agent rounds, the first
// included, when neither the task nor its retry policy sets one (RETRY-08).
const DefaultMaxAttempts = 3

// MaxMaxAttempts bounds max_attempts.
const MaxMaxAttempts = 20

// What a retry starts from.
const (
	// RetryFromPrevious: the next attempt's workspace holds the previous
	// attempt's work (uncommitted, on top of the base and dependencies),
	// so the agent fixes rather than redoes.
	RetryFromPrevious = "previous"
	// RetryFromBase: the next attempt starts from the base and
	// dependencies alone.
	RetryFromBase = "base"
)

// RetryPolicy sets a task's budget of rounds and the delay before each
// retry: InitialDelay before the second attempt, multiplied by Multiplier
// for each later one, capped at MaxDelay, then spread by ±Jitter (a
// fraction) so that many nodes failing at once do not retry in step.
type RetryPolicy struct {
	Name string `json:"name"`
	// MaxAttempts is the budget of rounds the policy gives a task that
	// sets none itself (0: DefaultMaxAttempts).
	MaxAttempts  int           `json:"max_attempts,omitempty"`
	InitialDelay time.Duration `json:"initial_delay"`
	Multiplier   float64       `json:"multiplier"`
	MaxDelay     time.Duration `json:"max_delay"`
	Jitter       float64       `json:"jitter,omitempty"`
}

// DefaultRetryPolicyName is the policy of a task that names none.
const DefaultRetryPolicyName = "default"

// builtinRetryPolicies are the named policies every coordinator knows
// (RETRY-08): default for most work, aggressive for critical paths (more
// rounds, shorter waits), conservative for expensive work (fewer rounds,
// longer waits).
var builtinRetryPolicies = map[string]RetryPolicy{
	"default": {Name: "default", MaxAttempts: 3, InitialDelay: 2 * time.Second, Multiplier: 2,
		MaxDelay: 30 * time.Second, Jitter: 0.1},
	"aggressive": {Name: "aggressive", MaxAttempts: 5, InitialDelay: time.Second, Multiplier: 1.5,
		MaxDelay: time.Minute},
	"conservative": {Name: "conservative", MaxAttempts: 2, InitialDelay: 5 * time.Second, Multiplier: 3,
		MaxDelay: 2 * time.Minute},
}

// BuiltinRetryPolicy returns the built-in policy of that name.
func BuiltinRetryPolicy(name string) (RetryPolicy, bool) {
	p, ok := builtinRetryPolicies[name]
	return p, ok
}

// BuiltinRetryPolicyNames lists the built-in policies, sorted.
func BuiltinRetryPolicyNames() []string {
	out := make([]string, 0, len(builtinRetryPolicies))
	for n := range builtinRetryPolicies {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Validate checks a policy's numbers: attempts within [0, MaxMaxAttempts],
// delays of at most a day with the maximum not below the first, a
// multiplier from 1 to 10 and a jitter from 0 to 1.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 0 || p.MaxAttempts > MaxMaxAttempts:
		return fmt.Errorf("max_attempts %d: must be between 1 and %d", p.MaxAttempts, MaxMaxAttempts)
	case p.InitialDelay < 0 || p.InitialDelay > 24*time.Hour:
		return fmt.Errorf("initial_delay %s: must be between 0 and 24h", p.InitialDelay)
	case p.MaxDelay < 0 || p.MaxDelay > 24*time.Hour:
		return fmt.Errorf("max_delay %s: must be between 0 and 24h", p.MaxDelay)
	case p.MaxDelay > 0 && p.MaxDelay < p.InitialDelay:
		return fmt.Errorf("max_delay %s is shorter than initial_delay %s", p.MaxDelay, p.InitialDelay)
	case p.Multiplier != 0 && (p.Multiplier < 1 || p.Multiplier > 10):
		return fmt.Errorf("multiplier %g: must be between 1 and 10", p.Multiplier)
	case p.Jitter < 0 || p.Jitter > 1:
		return fmt.Errorf("jitter %g: must be between 0 and 1", p.Jitter)
	}
	return nil
}

// Delay is the wait before attempt next (≥ 2). The jitter is derived from
// seed (the node's identity), not from a random source, so that every
// coordinator replaying the log computes the same delay.
func (p RetryPolicy) Delay(next int, seed string) time.Duration {
	if next < 2 || p.InitialDelay <= 0 {
		return 0
	}
	mult := p.Multiplier
	if mult < 1 {
		mult = 1
	}
	d := float64(p.InitialDelay) * math.Pow(mult, float64(next-2))
	if p.MaxDelay > 0 && d > float64(p.MaxDelay) {
		d = float64(p.MaxDelay)
	}
	if p.Jitter > 0 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(seed))
		u := float64(h.Sum64()%10001)/10000*2 - 1 // in [-1, 1]
		d += d * p.Jitter * u
	}
	return time.Duration(d).Round(time.Millisecond)
}
