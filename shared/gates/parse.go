package gates

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"gopkg.in/yaml.v3"
)

// Fields of a gate definition. timeout_secs, poll_interval_secs and
// max_pending_secs are aliases of timeout, poll_interval and max_pending,
// in whole seconds (the spelling of TOML gate files).
var gateFields = []string{
	"name", "command", "description", "timeout", "timeout_secs", "depends_on", "severity", "env",
	"working_dir", "parallel_safe", "cache", "cache_inputs", "force_hash_large_cache_inputs",
	"skip_on_dependency_failure", "allowed_writes", "allow_shell", "max_retries", "poll_interval",
	"poll_interval_secs", "max_pending", "max_pending_secs", "image", "resources", "pool", "cache_dirs",
	"type", "agent", "reviewers", "quorum", "prompt", "context", "role",
}

// reservedGateFields are keys a gate may not have (GC-16, GC-17).
var reservedGateFields = map[string]string{
	"required": "whether a gate is required is up to the task that runs it: list the gate under the task's gates (required: [...])",
	"optional": "whether a gate is optional is up to the task that runs it: list the gate under the task's gates (optional: [...])",
	"on_fail":  "on_fail is up to the task that runs the gate: set it under the task's gates (on_fail: {gate: block|retry_with_feedback|warn})",
	"hardened_integrity": "hardened_integrity is not supported: " +
		"every gate's workspace integrity is checked already",
}

var gateNameRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?$`)

// ValidName reports whether s may name a gate: GC-01's pattern (letters,
// digits, '-' and '_'; first and last characters a letter or digit) without
// '.', which separates NATS subject tokens, and at most 64 characters.
func ValidName(s string) bool { return len(s) <= MaxNameLen && gateNameRE.MatchString(s) }

// NameRule describes ValidName for messages.
const NameRule = "letters, digits, '-' and '_', starting and ending with a letter or digit, at most 64 characters " +
	"('.' is not allowed: gate names become parts of NATS subjects)"

// ParseOptions are what a gate definition does not say itself.
type ParseOptions struct {
	// Origin is recorded in each gate's Source.
	Origin Origin
	// DefaultPool is the pool of gates that set none ("" = "default"): a
	// workflow's defaults.pool.
	DefaultPool string
	// Context, if set, resolves a review gate's context: (a context
	// strategy's name, or {strategy, budget, targets, interfaces}) into
	// its full definition, reporting problems at n; nil where no
	// strategies are known, and a review gate's context is then an error.
	Context func(n *yaml.Node, what string) *protocol.ContextSpec
	// Role, if set, resolves a review gate's role: (a role's name) into
	// what the gate's reviewers take from it, reporting problems at n;
	// ok is false when it could not. nil where no roles are known.
	Role func(n *yaml.Node, what string) (r ReviewRole, ok bool)
}

// Str returns the value of a scalar. Numbers and booleans are taken as
// written; null, lists and mappings are reported, and so are NUL bytes.
func (c *Checker) Str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || IsNull(n) || n.ShortTag() == "!!binary" {
		c.Addf(n, "%s must be a string, got %s", what, Describe(n))
		return "", false
	}
	if strings.IndexByte(n.Value, 0) >= 0 {
		c.Addf(n, "%s must not contain NUL bytes", what)
		return "", false
	}
	return n.Value, true
}

// Bool returns a boolean; anything else (yes, "true", 1) is reported.
func (c *Checker) Bool(n *yaml.Node, what string) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		c.Addf(n, "%s must be true or false, got %s", what, Describe(n))
		return false, false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		c.Addf(n, "%s must be true or false, got %q", what, n.Value)
		return false, false
	}
	return b, true
}

// Int returns an integer in [lo, hi].
func (c *Checker) Int(n *yaml.Node, what string, lo, hi int64) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		c.Addf(n, "%s must be an integer, got %s", what, Describe(n))
		return 0, false
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		c.Addf(n, "%s %q is not a valid integer", what, n.Value)
		return 0, false
	}
	if v < lo || v > hi {
		c.Addf(n, "%s %s is out of range: must be between %d and %d", what, n.Value, lo, hi)
		return 0, false
	}
	return v, true
}

// Seconds parses a Go duration string ("90s", "10m") or an integer number
// of seconds, rounding fractions of a second up, and checks it lies in
// [lo, hi].
func (c *Checker) Seconds(n *yaml.Node, what string, lo, hi time.Duration) (time.Duration, bool) {
	var secs int64
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
		if err := n.Decode(&secs); err != nil {
			c.Addf(n, "%s %q is not a valid number of seconds", what, n.Value)
			return 0, false
		}
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		d, err := time.ParseDuration(n.Value)
		if err != nil {
			c.Addf(n, "invalid %s %q: use a Go duration such as 90s or 10m, or an integer number of seconds", what, n.Value)
			return 0, false
		}
		secs = int64(seconds(d))
	default:
		c.Addf(n, "%s must be a duration such as 10m or an integer number of seconds, got %s", what, Describe(n))
		return 0, false
	}
	if secs < int64(lo/time.Second) || secs > int64(hi/time.Second) {
		c.Addf(n, "%s %s is out of range: must be between %s and %s", what, n.Value, FormatDuration(lo), FormatDuration(hi))
		return 0, false
	}
	return time.Duration(secs) * time.Second, true
}

// FormatDuration renders whole seconds compactly: 1h, 10m, 90s.
func FormatDuration(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s != 0 && s%3600 == 0:
		return fmt.Sprintf("%dh", s/3600)
	case s != 0 && s%60 == 0:
		return fmt.Sprintf("%dm", s/60)
	}
	return fmt.Sprintf("%ds", s)
}

// NameList returns a list of names (depends_on, a task's gates),
// reporting repeats. The nodes are returned so later checks can point at
// each entry.
func (c *Checker) NameList(n *yaml.Node, what string) ([]string, []*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		hint := ""
		if n.Kind == yaml.ScalarNode && !IsNull(n) {
			hint = fmt.Sprintf(", e.g. [%s]", n.Value)
		}
		c.Addf(n, "%s must be a list of names%s, got %s", what, hint, Describe(n))
		return nil, nil, false
	}
	names := make([]string, 0, len(n.Content))
	nodes := make([]*yaml.Node, 0, len(n.Content))
	first := map[string]int{}
	mark := len(c.Problems)
	for _, item := range n.Content {
		s, good := c.Str(item, what+" entry")
		line, dup := first[s]
		switch {
		case !good:
		case dup:
			c.Addf(item, "%s lists %q twice (first at line %d)", what, s, line)
		default:
			first[s] = c.line(item)
			names = append(names, s)
			nodes = append(nodes, item)
		}
	}
	return names, nodes, len(c.Problems) == mark
}

// Command returns an argv list of strings (GC-02), rejecting a string (with
// the list form it should have been, CM-02), an empty list and an empty
// program name. It does not look for shells: see CheckCommand.
func (c *Checker) Command(n *yaml.Node, what string) ([]string, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		c.Addf(n, "%s must be an argv list, e.g. %s, not a string: commands are not run by a shell", what, argvExample(n.Value))
		return nil, false
	}
	if n.Kind != yaml.SequenceNode {
		c.Addf(n, "%s must be an argv list, e.g. [go, test, ./...], got %s", what, Describe(n))
		return nil, false
	}
	if len(n.Content) == 0 {
		c.Addf(n, "%s is empty; give the program and its arguments, e.g. [go, test, ./...]", what)
		return nil, false
	}
	argv := make([]string, 0, len(n.Content))
	mark := len(c.Problems)
	for i, item := range n.Content {
		s, good := c.Str(item, fmt.Sprintf("%s[%d]", what, i))
		switch {
		case !good:
		case i == 0 && strings.TrimSpace(s) == "":
			c.Addf(item, "%s: the program name is empty", what)
		default:
			argv = append(argv, s)
		}
	}
	if len(c.Problems) != mark {
		return nil, false
	}
	return argv, true
}

// CheckCommand rejects a command that runs a shell unless allowShell
// (CM-06; hint ends the message, e.g. how to allow it), and one that sets
// a denylisted variable through an env wrapper whatever allowShell says
// (CM-07). Problems are placed at n, the command's node.
func (c *Checker) CheckCommand(n *yaml.Node, argv []string, what string, allowShell bool, hint string) bool {
	ok := true
	if !allowShell {
		if _, desc, found := detectShell(argv); found {
			c.Addf(n, "%s runs a shell (%s); commands are argv lists run without a shell, so give the program and its arguments directly, e.g. [go, test, ./...]%s", what, desc, hint)
			ok = false
		}
	}
	if key, found := DeniedEnvViaWrapper(argv); found {
		c.Addf(n, "%s sets %s through an env wrapper; it may not be set: %s", what, key, EnvDenied(key))
		ok = false
	}
	return ok
}

// argvExample renders a string command as the flow list it should have
// been, or a generic example when it uses shell syntax.
func argvExample(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 || strings.ContainsAny(s, "|&;<>()$`\\\"'*?~{}") {
		return "[go, test, ./...]"
	}
	return "[" + strings.Join(f, ", ") + "]"
}

// Env parses an environment mapping of names to scalar values (GC-07).
// Names must be POSIX identifiers, and denylisted names (EnvDenied) are
// errors at load, rather than being dropped silently at run time, so the
// author learns the variable would not reach the gate.
func (c *Checker) Env(n *yaml.Node, what string) (map[string]string, bool) {
	if IsNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		c.Addf(n, "%s must be a mapping of variable names to values, got %s", what, Describe(n))
		return nil, false
	}
	out := make(map[string]string, len(n.Content)/2)
	line := map[string]int{}
	mark := len(c.Problems)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key, good := c.Str(k, what+" name")
		first, dup := line[key]
		switch why := EnvDenied(key); {
		case !good:
		case !ValidEnvName(key):
			c.Addf(k, "invalid %s name %q: use letters, digits and '_', not starting with a digit", what, key)
		case why != "":
			c.Addf(k, "%s may not set %s: %s", what, key, why)
		case dup:
			c.Addf(k, "%s sets %s twice (first at line %d)", what, key, first)
		default:
			line[key] = c.line(k)
			if val, good := c.Str(v, fmt.Sprintf("%s value of %s", what, key)); good {
				out[key] = val
			}
		}
	}
	return out, len(c.Problems) == mark
}

// WorkingDir checks a working directory: relative, inside the repository,
// not a pattern (GC-08). It returns the cleaned path, "" for the root.
func (c *Checker) WorkingDir(n *yaml.Node, what string) (string, bool) {
	s, ok := c.Str(n, what)
	if !ok {
		return "", false
	}
	if s == "" {
		c.Addf(n, "%s is empty; omit it to run in the repository root", what)
		return "", false
	}
	p, problem := relPath(s)
	if problem != "" {
		c.Addf(n, "%s %q %s", what, s, problem)
		return "", false
	}
	if strings.ContainsAny(p, "*?[") {
		c.Addf(n, "%s %q must be a directory, not a pattern", what, s)
		return "", false
	}
	return cleanDir(p), true
}

// Paths parses a list of repository-relative paths or globs (cache_inputs,
// allowed_writes: GC-11, GC-14). With protect, patterns that could cover
// .git/ or .supervisor/ are errors (PP-01…PP-04) and patterns that look
// like source code are warned about.
func (c *Checker) Paths(n *yaml.Node, what string, protect bool) ([]string, bool) {
	if IsNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		c.Addf(n, "%s must be a list of paths or globs, got %s", what, Describe(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	mark := len(c.Problems)
	for _, item := range n.Content {
		s, good := c.Str(item, what+" entry")
		if !good {
			continue
		}
		p, problem := relPath(s)
		if problem == "" && (p == "" || p == ".") {
			problem = "names the repository root; use a path or glob below it"
		}
		p = cleanPattern(p)
		if problem == "" && protect {
			problem = protectedProblem(p)
		}
		if problem != "" {
			c.Addf(item, "%s entry %q %s", what, s, problem)
			continue
		}
		if protect && sourceLike(p) {
			c.Warnf(item, "%s entry %q may match source files; a gate that rewrites source would go unnoticed", what, s)
		}
		out = append(out, p)
	}
	return out, len(c.Problems) == mark
}

// CacheDirs parses a gate's cache_dirs: at most protocol.MaxCacheDirs
// directories, each relative to the command's HOME or absolute in the
// container (protocol.CheckCacheDir), none the same as or under another,
// nor one of the caches every gate gets (Go's build and module caches).
func (c *Checker) CacheDirs(n *yaml.Node, what string) ([]string, bool) {
	if IsNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		c.Addf(n, "%s must be a list of directories, got %s", what, Describe(n))
		return nil, false
	}
	if len(n.Content) > protocol.MaxCacheDirs {
		c.Addf(n, "%s lists %d directories; at most %d are allowed", what, len(n.Content), protocol.MaxCacheDirs)
		return nil, false
	}
	mark := len(c.Problems)
	var out []string
	for _, item := range n.Content {
		s, good := c.Str(item, what+" entry")
		if !good {
			continue
		}
		p, err := protocol.CheckCacheDir(s)
		if err != nil {
			c.Addf(item, "%s entry %q %v", what, s, err)
			continue
		}
		clash := ""
		for _, b := range BuiltinCacheDirs {
			if protocol.CacheDirsOverlap(p, b) {
				clash = fmt.Sprintf("overlaps %s, a cache every gate gets already", b)
			}
		}
		for _, q := range out {
			if protocol.CacheDirsOverlap(p, q) {
				clash = fmt.Sprintf("overlaps the earlier entry %q", q)
			}
		}
		if clash != "" {
			c.Addf(item, "%s entry %q %s", what, s, clash)
			continue
		}
		out = append(out, p)
	}
	return out, len(c.Problems) == mark
}

// BuiltinCacheDirs are the caches every gate gets, relative to HOME: Go's
// build cache (GOCACHE) and module cache (GOMODCACHE), where Go puts them
// by default.
var BuiltinCacheDirs = []string{".cache/go-build", "go/pkg/mod"}

// Warnings are problems that do not make a definition invalid.
func (c *Checker) Warnf(n *yaml.Node, format string, args ...any) {
	line, col := c.pos(n)
	c.Warnings = append(c.Warnings, Problem{File: c.File, Line: line, Column: col, Message: fmt.Sprintf(format, args...)})
}

var memoryRE = regexp.MustCompile(`^(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:[iI]?[bB])?$`)

// Memory limits (Docker's minimum is 6 MiB).
const (
	minMemory = 6 << 20
	maxMemory = 1 << 40
)

// parseMemory parses "2g", "512m", "1.5GiB" or a number of bytes; units
// are powers of 1024, as in docker run --memory.
func parseMemory(n *yaml.Node) (int64, bool) {
	if n.Kind != yaml.ScalarNode {
		return 0, false
	}
	switch n.ShortTag() {
	case "!!int":
		var v int64
		if err := n.Decode(&v); err != nil {
			return 0, false
		}
		return v, true
	case "!!str":
	default:
		return 0, false
	}
	m := memoryRE.FindStringSubmatch(strings.TrimSpace(n.Value))
	if m == nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	shift := map[string]uint{"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[strings.ToLower(m[2])]
	v := f * float64(uint64(1)<<shift)
	if v > math.MaxInt64/2 {
		return 0, false
	}
	return int64(math.Ceil(v)), true
}

// Resources parses a gate's sandbox limits: memory ("2g" or bytes), cpus
// (a number), pids (an integer).
func (c *Checker) Resources(n *yaml.Node, what string) (Resources, bool) {
	var r Resources
	if IsNull(n) {
		return r, true
	}
	f, ok := c.Fields(n, what, "memory", "cpus", "pids")
	if !ok {
		return r, false
	}
	before := len(c.Problems)
	if x, ok := f["memory"]; ok {
		v, good := parseMemory(x.Val)
		switch {
		case !good:
			c.Addf(x.Val, "%s memory must be a size such as 512m or 2g, or a number of bytes, got %s %q", what, Describe(x.Val), x.Val.Value)
		case v < minMemory || v > maxMemory:
			c.Addf(x.Val, "%s memory %s is out of range: must be between 6m and 1t", what, x.Val.Value)
		default:
			r.MemoryBytes = v
		}
	}
	if x, ok := f["cpus"]; ok {
		var v float64
		tag := x.Val.ShortTag()
		switch {
		case x.Val.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float"):
			c.Addf(x.Val, "%s cpus must be a number such as 2 or 0.5, got %s", what, Describe(x.Val))
		case x.Val.Decode(&v) != nil || math.IsNaN(v) || v <= 0 || v > 1024:
			c.Addf(x.Val, "%s cpus %s is out of range: must be more than 0 and at most 1024", what, x.Val.Value)
		default:
			r.CPUs = v
		}
	}
	if x, ok := f["pids"]; ok {
		if v, good := c.Int(x.Val, what+" pids", 1, 1<<22); good {
			r.PIDs = v
		}
	}
	return r, len(c.Problems) == before
}

var imageRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$`)

// Gate parses one gate definition, a mapping. key is the mapping key that
// names the gate in the mapping form of a gates section (GY-03),
// or nil in the list form, where the definition has a name field. ok is
// false if the definition had any problem; the gate returned then holds
// what could be parsed, for cross-checks.
func (c *Checker) Gate(n, key *yaml.Node, o ParseOptions) (Gate, bool) {
	before := len(c.Problems)
	g := New("")
	g.Pool = o.DefaultPool
	if g.Pool == "" {
		g.Pool = protocol.DefaultPool
	}
	g.Source = c.Position(n)
	g.Source.Origin = o.Origin
	what := "gate"
	reserved := reservedGateFields
	if key != nil {
		g.Source = c.Position(key)
		g.Source.Origin = o.Origin
		if s, good := c.gateName(key); good {
			g.Name = s
			what = fmt.Sprintf("gate %q", s)
		}
		reserved = map[string]string{"name": "the gate's name is its key under gates; remove this field"}
		for k, v := range reservedGateFields {
			reserved[k] = v
		}
	}
	fieldsWhat := "gate"
	if key != nil {
		fieldsWhat = what
	}
	f, ok := c.FieldsReserved(n, fieldsWhat, reserved, gateFields...)
	if !ok {
		return g, false
	}
	if key == nil {
		if x, ok := f["name"]; ok {
			g.Source = c.Position(x.Val)
			g.Source.Origin = o.Origin
			if s, good := c.gateName(x.Val); good {
				g.Name = s
				what = fmt.Sprintf("gate %q", s)
			}
		} else {
			c.Addf(n, "gate is missing required field \"name\"")
		}
	}
	g.Type = c.gateType(f, what)
	var cmdNode *yaml.Node
	switch x, ok := f["command"]; {
	case g.Type == protocol.GateTypeReview:
		c.review(n, f, &g, what, o)
	case ok:
		c.reviewOnly(f, what)
		cmdNode = x.Val
		g.Command, _ = c.Command(x.Val, what+" command")
	default:
		c.reviewOnly(f, what)
		c.Addf(n, "%s is missing required field \"command\"", what)
	}
	if x, ok := f["description"]; ok && !IsNull(x.Val) {
		g.Description, _ = c.Str(x.Val, what+" description")
	}
	g.Timeout = c.durationField(f, "timeout", "timeout_secs", what, time.Second, MaxTimeout, DefaultTimeout)
	g.PollInterval = c.durationField(f, "poll_interval", "poll_interval_secs", what, MinPollInterval, MaxPollInterval, DefaultPollInterval)
	g.MaxPending = c.durationField(f, "max_pending", "max_pending_secs", what, MinPollInterval, MaxMaxPending, DefaultMaxPending)
	if g.MaxPending < g.PollInterval {
		x, ok := f["max_pending"]
		if !ok {
			x, ok = f["max_pending_secs"]
		}
		if !ok {
			x, ok = f["poll_interval"]
			if !ok {
				x = f["poll_interval_secs"]
			}
		}
		c.Addf(x.Val, "%s max_pending (%s) is shorter than poll_interval (%s): a pending gate would time out before it is polled",
			what, FormatDuration(g.MaxPending), FormatDuration(g.PollInterval))
	}
	if x, ok := f["depends_on"]; ok && !IsNull(x.Val) {
		var nodes []*yaml.Node
		g.DependsOn, nodes, _ = c.NameList(x.Val, what+" depends_on")
		for _, dn := range nodes {
			s := c.Position(dn)
			s.Origin = o.Origin
			g.depPos = append(g.depPos, s)
		}
	}
	if x, ok := f["severity"]; ok {
		if s, good := c.Str(x.Val, what+" severity"); good {
			if sev, valid := ParseSeverity(s); valid {
				g.Severity = sev
			} else {
				c.Addf(x.Val, "invalid %s severity %q: must be one of error, warning, info", what, s)
			}
		}
	}
	if x, ok := f["env"]; ok {
		g.Env, _ = c.Env(x.Val, what+" env")
		if g.Type == protocol.GateTypeReview {
			c.rejectCredentials(x.Val, what+" env")
		}
	}
	if x, ok := f["working_dir"]; ok {
		g.WorkingDir, _ = c.WorkingDir(x.Val, what+" working_dir")
	}
	cache := &g.Cache
	if g.Type == protocol.GateTypeReview {
		cache = new(bool) // checked by review: never true
	}
	bools := []struct {
		key string
		dst *bool
	}{
		{"parallel_safe", &g.ParallelSafe},
		{"cache", cache},
		{"force_hash_large_cache_inputs", &g.ForceHashLargeCacheInputs},
		{"skip_on_dependency_failure", &g.SkipOnDependencyFailure},
		{"allow_shell", &g.AllowShell},
	}
	for _, b := range bools {
		if x, ok := f[b.key]; ok {
			if v, good := c.Bool(x.Val, what+" "+b.key); good {
				*b.dst = v
			}
		}
	}
	if x, ok := f["cache_inputs"]; ok {
		g.CacheInputs, _ = c.Paths(x.Val, what+" cache_inputs", false)
	}
	if x, ok := f["allowed_writes"]; ok && g.Type != protocol.GateTypeReview {
		g.AllowedWrites, _ = c.Paths(x.Val, what+" allowed_writes", true)
	}
	if x, ok := f["max_retries"]; ok {
		if v, good := c.Int(x.Val, what+" max_retries", 0, MaxMaxRetries); good {
			g.MaxRetries = int(v)
		}
	}
	if x, ok := f["image"]; ok {
		if s, good := c.Str(x.Val, what+" image"); good {
			if !imageRE.MatchString(s) || len(s) > 255 {
				c.Addf(x.Val, "invalid %s image %q: give an image reference such as golang:1.26 or registry.example.com/ci/go@sha256:…", what, s)
			} else {
				g.Image = s
			}
		}
	}
	if x, ok := f["resources"]; ok {
		g.Resources, _ = c.Resources(x.Val, what+" resources")
	}
	if x, ok := f["cache_dirs"]; ok {
		if g.Type == protocol.GateTypeReview {
			c.Addf(x.Key, "%s: cache_dirs is for command gates; a review gate runs no build tools", what)
		} else {
			g.CacheDirs, _ = c.CacheDirs(x.Val, what+" cache_dirs")
		}
	}
	if x, ok := f["pool"]; ok {
		if s, good := c.Str(x.Val, what+" pool"); good {
			if protocol.ValidName(s) {
				g.Pool = s
			} else {
				c.Addf(x.Val, "invalid %s pool %q: use %s", what, s, protocol.NameRule)
			}
		}
	}
	if cmdNode != nil && g.Command != nil {
		c.CheckCommand(cmdNode, g.Command, what+" command", g.AllowShell,
			", or set allow_shell: true if the gate really needs a shell")
	}
	return g, len(c.Problems) == before
}

// gateName checks a gate name node.
func (c *Checker) gateName(n *yaml.Node) (string, bool) {
	s, ok := c.Str(n, "gate name")
	if !ok {
		return "", false
	}
	if !ValidName(s) {
		c.Addf(n, "invalid gate name %q: use %s", s, NameRule)
		return s, false
	}
	return s, true
}

// durationField parses a duration written under key or its *_secs alias
// (in seconds), rejecting both at once; def when neither is set.
func (c *Checker) durationField(f map[string]Field, key, alias, what string, lo, hi, def time.Duration) time.Duration {
	x, hasKey := f[key]
	y, hasAlias := f[alias]
	switch {
	case hasKey && hasAlias:
		c.Addf(y.Key, "%s sets both %s and %s (an alias); keep one", what, key, alias)
		return def
	case hasAlias:
		x, key = y, alias
	case !hasKey:
		return def
	}
	if d, ok := c.Seconds(x.Val, what+" "+key, lo, hi); ok {
		return d
	}
	return def
}

// GateList parses a gates section: a list of definitions with names (the
// form workflows use) or a mapping from name to definition. Names
// must be unique; a repeated name is reported at the later definition.
func (c *Checker) GateList(n *yaml.Node, what string, o ParseOptions) []Gate {
	gs := c.Collector()
	switch n.Kind {
	case yaml.SequenceNode:
		for _, item := range n.Content {
			g, _ := c.Gate(item, nil, o)
			gs.Add(g)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || IsNull(k) {
				c.Addf(k, "%s keys must be gate names, got %s", what, Describe(k))
				continue
			}
			g, _ := c.Gate(v, k, o)
			gs.Add(g)
		}
	default:
		if !IsNull(n) {
			c.Addf(n, "%s must be a list of gate definitions or a mapping from gate name to definition, got %s", what, Describe(n))
		}
	}
	return gs.Gates
}

// GateCollector collects gates whose names must be unique: a repeated name
// is reported, at the later definition, to the Checker that made it.
type GateCollector struct {
	c     *Checker
	first map[string]Source
	// Gates are the gates collected, in order.
	Gates []Gate
}

// Collector returns an empty GateCollector reporting to c.
func (c *Checker) Collector() *GateCollector {
	return &GateCollector{c: c, first: map[string]Source{}}
}

// Add collects g unless its name is empty (its problems are reported
// already) or taken (reported here).
func (gc *GateCollector) Add(g Gate) {
	if g.Name == "" {
		return
	}
	if prev, dup := gc.first[g.Name]; dup {
		gc.c.AddAt(g.Source, "duplicate gate name %q (first defined at line %d)", g.Name, prev.Line)
		return
	}
	gc.first[g.Name] = g.Source
	gc.Gates = append(gc.Gates, g)
}

// Has reports whether a gate named name was collected.
func (gc *GateCollector) Has(name string) bool {
	_, ok := gc.first[name]
	return ok
}
