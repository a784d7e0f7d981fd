package gates

import (
	"fmt"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Limits and defaults of the gate schema (GC-*, Q-8).
const (
	// DefaultTimeout is a gate's timeout when it sets none (GC-04).
	DefaultTimeout = 300 * time.Second
	// MaxTimeout is the longest gate timeout (GC-04).
	MaxTimeout = 3600 * time.Second
	// DefaultMaxRetries is how many retries a gate's failures may cause
	// the node escalates when the gate fails a round after that many
	// retries because of it.
	DefaultMaxRetries = 3
	// MaxMaxRetries bounds max_retries.
	MaxMaxRetries = 100
	// DefaultPollInterval is how often a pending gate (exit 75) is polled;
	// polls are not attempts.
	DefaultPollInterval = 30 * time.Second
	// MinPollInterval and MaxPollInterval bound poll_interval.
	MinPollInterval = time.Second
	MaxPollInterval = 24 * time.Hour
	// DefaultMaxPending is how long a gate may stay pending, counted from
	// its first pending result, before the result becomes timeout.
	DefaultMaxPending = 24 * time.Hour
	// MaxMaxPending bounds max_pending (30 days).
	MaxMaxPending = 30 * 24 * time.Hour
	// MaxNameLen is the longest gate name.
	MaxNameLen = 64
)

// Severity says how much a gate's failure matters by default (GC-06).
type Severity string

// Severities (EN-01).
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
	SeverityInfo    Severity = "info"
)

// ParseSeverity parses a severity case-insensitively (GC-06).
func ParseSeverity(s string) (Severity, bool) {
	switch v := Severity(strings.ToLower(s)); v {
	case SeverityError, SeverityWarning, SeverityInfo:
		return v, true
	}
	return "", false
}

// FailAction is what a gate's failure does to its node (EN-03).
type FailAction string

// Fail actions.
const (
	// Block stops the node at once: no retry, the node escalates and a
	// human decides.
	Block FailAction = "block"
	// RetryWithFeedback sends the failure back to the agent for another
	// round, with feedback, while the node has attempts left and the gate
	// retries left; then the node escalates. It is what a failure of a
	// gate of severity error does unless the task says otherwise.
	RetryWithFeedback FailAction = "retry_with_feedback"
	// Warn logs the failure and carries on; for dependency purposes the
	// gate counts as passed (DP-07).
	Warn FailAction = "warn"
)

// ParseFailAction parses an on_fail value case-insensitively (RC-04).
func ParseFailAction(s string) (FailAction, bool) {
	switch v := FailAction(strings.ToLower(s)); v {
	case Block, RetryWithFeedback, Warn:
		return v, true
	}
	return "", false
}

// DefaultOnFail is a severity's fail action when nothing else says (OF-01,
// with the loop): an error is retried with feedback, warning and info
// warn. An unknown or empty severity is treated as error.
func (s Severity) DefaultOnFail() FailAction {
	switch s {
	case SeverityWarning, SeverityInfo:
		return Warn
	}
	return RetryWithFeedback
}

// ResolveOnFail decides what a failure of gate g does to a node:
//   - OF-01: an explicit on_fail (from the task) wins, else the severity
//     default (error → retry_with_feedback, warning/info → warn);
//   - OF-02: a required gate never warns: an explicit warn, or a warning or
//     info severity, is upgraded to retry_with_feedback (it blocks, and the
//     agent gets another round);
//   - OF-03: an optional gate (or one only pulled in as a dependency)
//     follows the severity default, so an optional error gate blocks.
//
// explicit is "" when the task sets no on_fail for the gate. An integrity
// violation always blocks whatever this returns: a gate that changed its
// workspace outside allowed_writes cannot be trusted, whatever its severity.
func ResolveOnFail(g Gate, required bool, explicit FailAction) FailAction {
	action := explicit
	if _, ok := ParseFailAction(string(action)); !ok {
		action = g.Severity.DefaultOnFail()
	}
	if required && action == Warn {
		return RetryWithFeedback
	}
	return action
}

// TaskOnFail resolves, for the engine, what a failure of gate spec does to
// task t: t.OnFail, whether t requires the gate (TaskSpec.GateRequired; a
// gate run only as a dependency is not required) and the gate's severity,
// combined by ResolveOnFail (OF-01…OF-04).
func TaskOnFail(t protocol.TaskSpec, spec protocol.GateSpec) FailAction {
	explicit, _ := ParseFailAction(t.OnFail[spec.Name])
	return ResolveOnFail(FromSpec(spec), t.GateRequired(spec.Name), explicit)
}

// Origin says which source a gate definition came from. Sources are listed
// from lowest to highest precedence (LD-01): a definition from a later
// source replaces the whole gate of that name.
type Origin string

// Gate sources.
const (
	OriginBuiltin  Origin = "builtin"
	OriginUser     Origin = "user"
	OriginProject  Origin = "project"
	OriginWorkflow Origin = "workflow"
	OriginTask     Origin = "task"
)

// Source records where a gate was defined: the file and the position of
// its name (or of its definition when it has no name key).
type Source struct {
	Origin Origin
	File   string
	Line   int
	Column int
}

// String formats the source as file:line (file alone when the line is
// unknown).
func (s Source) String() string {
	switch {
	case s.File == "" && s.Line == 0:
		return ""
	case s.Line == 0:
		return s.File
	}
	return fmt.Sprintf("%s:%d", s.File, s.Line)
}

// Resources are a gate's sandbox limits; zero fields mean the runner's
// defaults.
type Resources = protocol.GateResources

// Gate is one gate definition: what to run and how (GC-01…GC-15 and
// Whether a gate is required, optional, and what its
// failure does belong to the task that runs it, not to the gate (GC-16).
type Gate struct {
	// Name identifies the gate (GC-01). It becomes part of artifact names
	// and job ids: letters, digits, '-' and '_', starting and ending with a
	// letter or digit, at most 64 characters. '.' is not allowed: names
	// are keys of the gate registry's KV bucket, where '.' separates NATS
	// subject tokens.
	Name string
	// Command is the argv run without a shell (GC-02, CM-01); empty for
	// a review gate.
	Command []string
	// Type is "" for a command gate, protocol.GateTypeReview for a review
	// gate, whose verdict comes from the agent reviewers of Review
	// (EXE-009, OUT-05).
	Type string
	// Review is a review gate's reviewers, prompt and quorum.
	Review *protocol.ReviewSpec
	// Description is free text (GC-03).
	Description string
	// Timeout bounds a run: default 300 s, at most 3600 s (GC-04), whole
	// seconds.
	Timeout time.Duration
	// DependsOn lists gates that must finish first (GC-05, DP-*).
	DependsOn []string
	// Severity is error (default), warning or info (GC-06).
	Severity Severity
	// Env is added to the sandbox's minimal environment (GC-07). Keys on
	// the denylist (PATH, HOME, USER, LD_*, PYTHONPATH, SUPERVISOR_*) are
	// rejected at load.
	Env map[string]string
	// WorkingDir is relative to the workspace root; "" is the root (GC-08).
	WorkingDir string
	// ParallelSafe is accepted so that existing gate files still load, and
	// has no effect: every gate job gets its own workspace, so all gates
	// of a dependency layer run in parallel anyway (GC-09).
	ParallelSafe bool
	// Cache enables the gate cache for passing results (GC-10, default true).
	Cache bool
	// CacheInputs are extra repository paths or globs hashed into the
	// cache key (GC-11).
	CacheInputs []string
	// ForceHashLargeCacheInputs hashes large cache inputs in full (GC-12).
	ForceHashLargeCacheInputs bool
	// SkipOnDependencyFailure skips the gate when a dependency failed in a
	// blocking way (GC-13, DP-07; default true).
	SkipOnDependencyFailure bool
	// AllowedWrites are paths or globs the gate may change in the
	// workspace (GC-14); .git/ and .supervisor/ never qualify.
	AllowedWrites []string
	// AllowShell permits a command that runs a shell (GC-15, CM-08).
	AllowShell bool
	// MaxRetries caps how many rounds this gate may fail before the node
	// escalates (Q-8; default 3). Parsed and carried; enforced once the
	// feedback loop is built.
	MaxRetries int
	// PollInterval is how often a pending gate is polled (default 30 s).
	PollInterval time.Duration
	// MaxPending is how long a gate may stay pending before it times out
	// (default 24 h).
	MaxPending time.Duration
	// Image is the container image the gate runs in ("" = the runner's).
	Image string
	// Resources are the sandbox limits.
	Resources Resources
	// Pool is the runner pool the gate's jobs go to (default "default").
	Pool string
	// CacheDirs are directories the gate's tools keep caches in, relative
	// to HOME or absolute in the container (protocol.CheckCacheDir): each
	// starts warm with trusted content and the gate's writes to it are
	// thrown away after the run (PERF-23).
	CacheDirs []string
	// Source is where the gate was defined.
	Source Source

	// depPos holds the position of each DependsOn entry, for messages.
	depPos []Source
}

// New returns a gate with every default applied (GC-04, GC-06, GC-10,
// GC-13, Q-8): what a definition that sets only name and command
// means.
func New(name string, command ...string) Gate {
	return Gate{
		Name:                    name,
		Command:                 command,
		Timeout:                 DefaultTimeout,
		Severity:                SeverityError,
		Cache:                   true,
		SkipOnDependencyFailure: true,
		MaxRetries:              DefaultMaxRetries,
		PollInterval:            DefaultPollInterval,
		MaxPending:              DefaultMaxPending,
		Pool:                    protocol.DefaultPool,
	}
}

// depSource returns where DependsOn[i] was written, or the gate's source.
func (g *Gate) depSource(i int) Source {
	if i < len(g.depPos) {
		return g.depPos[i]
	}
	return g.Source
}

// Spec converts the gate to its wire form, with every default explicit.
func (g Gate) Spec() protocol.GateSpec {
	cache, skip, retries := g.Cache, g.SkipOnDependencyFailure, g.MaxRetries
	s := protocol.GateSpec{
		Name:                      g.Name,
		Description:               g.Description,
		Command:                   cloneStrings(g.Command),
		Type:                      g.Type,
		Review:                    cloneReview(g.Review),
		TimeoutSeconds:            seconds(g.Timeout),
		DependsOn:                 cloneStrings(g.DependsOn),
		Pool:                      g.Pool,
		Env:                       cloneEnv(g.Env),
		WorkingDir:                g.WorkingDir,
		Severity:                  string(g.Severity),
		Cache:                     &cache,
		CacheInputs:               cloneStrings(g.CacheInputs),
		ForceHashLargeCacheInputs: g.ForceHashLargeCacheInputs,
		SkipOnDependencyFailure:   &skip,
		AllowedWrites:             cloneStrings(g.AllowedWrites),
		AllowShell:                g.AllowShell,
		MaxRetries:                &retries,
		PollIntervalSeconds:       seconds(g.PollInterval),
		MaxPendingSeconds:         seconds(g.MaxPending),
		Image:                     g.Image,
		CacheDirs:                 cloneStrings(g.CacheDirs),
		Source:                    g.Source.String(),
	}
	if s.Pool == "" {
		s.Pool = protocol.DefaultPool
	}
	if s.Severity == "" {
		s.Severity = string(SeverityError)
	}
	if g.Resources != (Resources{}) {
		r := g.Resources
		s.Resources = &r
	}
	return s
}

// FromSpec converts a wire-form gate back to a Gate, applying the defaults
// of fields the spec leaves unset (older events). The source keeps only
// the text form, in File.
func FromSpec(s protocol.GateSpec) Gate {
	g := New(s.Name, cloneStrings(s.Command)...)
	g.Description = s.Description
	g.Type, g.Review = s.Type, cloneReview(s.Review)
	if s.TimeoutSeconds > 0 {
		g.Timeout = time.Duration(s.TimeoutSeconds) * time.Second
	}
	g.DependsOn = cloneStrings(s.DependsOn)
	if s.Pool != "" {
		g.Pool = s.Pool
	}
	g.Env = cloneEnv(s.Env)
	g.WorkingDir = s.WorkingDir
	if sev, ok := ParseSeverity(s.Severity); ok {
		g.Severity = sev
	}
	g.Cache = s.UsesCache()
	g.CacheInputs = cloneStrings(s.CacheInputs)
	g.ForceHashLargeCacheInputs = s.ForceHashLargeCacheInputs
	g.SkipOnDependencyFailure = s.SkipsOnDependencyFailure()
	g.AllowedWrites = cloneStrings(s.AllowedWrites)
	g.AllowShell = s.AllowShell
	g.MaxRetries = s.Retries()
	g.PollInterval = s.PollInterval()
	g.MaxPending = s.MaxPending()
	g.Image = s.Image
	g.CacheDirs = cloneStrings(s.CacheDirs)
	if s.Resources != nil {
		g.Resources = *s.Resources
	}
	g.Source = Source{File: s.Source}
	return g
}

// seconds converts a duration to whole seconds, rounding up.
func seconds(d time.Duration) int {
	s := d / time.Second
	if d%time.Second > 0 {
		s++
	}
	return int(s)
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}

func cloneEnv(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
