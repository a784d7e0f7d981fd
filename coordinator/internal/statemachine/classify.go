package statemachine

import (
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// ErrorClass says what an unsuccessful agent round calls for (RETRY-02…07).
type ErrorClass string

// Error classes.
const (
	// Transient: the trouble is not the agent's work (a rate limit, an
	// overloaded API, the network): run it again after a back-off, without
	// using an attempt.
	Transient ErrorClass = "transient"
	// Fixable: the agent may do better with feedback: retry it, using an
	// attempt.
	Fixable ErrorClass = "fixable"
	// Fatal: no retry can help (the agent says it is blocked, it cannot
	// authenticate, the disk is full): a human decides at once.
	Fatal ErrorClass = "fatal"
)

// maxTransient bounds the transient re-runs of one node in a row: past
// it, something is wrong for good, and a human decides.
const maxTransient = 5

// maxRetryAfter caps how long a retry-after the agent reports may delay it.
const maxRetryAfter = time.Hour

// classPatterns are matched, case-insensitively (RETRY-07: the patterns
// and the text are compared alike, whatever their case), against what an
// agent printed and the error its worker reported, fatal first, then
// fixable, then transient; no match is fixable.
var classPatterns = []struct {
	class ErrorClass
	re    *regexp.Regexp
}{
	{Fatal, regexp.MustCompile(`(?i)blocked:|cannot proceed|impossible to|out of memory|disk full|no space left on device|` +
		`quota exceeded|permission denied|file not found|authentication failed|invalid api key`)},
	{Fixable, regexp.MustCompile(`(?i)invalid json|validation error|missing required field|could not extract|no json found|malformed output`)},
	{Transient, regexp.MustCompile(`(?i)timed? ?out|connection (refused|reset|closed)|temporary failure|eagain|econnreset|` +
		`rate.?limit|overloaded|try again|too many requests`)},
}

// retryAfterRE finds a retry-after the agent reported, in seconds.
var retryAfterRE = regexp.MustCompile(`(?i)retry[- _]after["':= ]*(\d+)`)

// runClasses maps the class an agent CLI's adapter gave a failed run
// (protocol.AgentRun.Class, package shared/agentcli) onto the loop's.
var runClasses = map[string]ErrorClass{"transient": Transient, "fatal": Fatal, "agent": Fixable}

// classifyAgent classifies a failed agent round: its class, the text that
// decided it ("" when nothing matched), and a retry-after the agent
// reported (0 if none). A timeout of the agent's own run is fixable: the
// agent took too long, which another round may not. When the agent's
// CLI adapter classified the failure from what the CLI reported (a.Run),
// its class decides; otherwise the patterns do, on what the agent printed.
func classifyAgent(a *protocol.AgentResult) (ErrorClass, string, time.Duration) {
	if a == nil || a.Status == protocol.AgentTimeout {
		return Fixable, "", 0
	}
	text := strings.Join([]string{a.Error, a.Stderr, a.Stdout}, "\n")
	// The command adapter does not read its agent's output: its class only
	// says the exit code was not 0, and the patterns read the output.
	if r := a.Run; r != nil && !r.Success && r.Adapter != "command" {
		if class, ok := runClasses[r.Class]; ok {
			match := r.Adapter + ": " + r.Class
			if e := strings.TrimSpace(r.Error); e != "" {
				match = r.Adapter + ": " + shortMatch(e)
			}
			var after time.Duration
			if class == Transient {
				after = retryAfter(r.Error + "\n" + text)
			}
			return class, match, after
		}
	}
	for _, p := range classPatterns {
		if m := p.re.FindString(text); m != "" {
			var after time.Duration
			if p.class == Transient {
				after = retryAfter(text)
			}
			return p.class, strings.ToLower(m), after
		}
	}
	return Fixable, "", 0
}

// retryAfter is the first retry-after in text, capped at maxRetryAfter (0
// if none).
func retryAfter(text string) time.Duration {
	if s := retryAfterRE.FindStringSubmatch(text); s != nil {
		if secs, err := strconv.Atoi(s[1]); err == nil {
			return min(time.Duration(secs)*time.Second, maxRetryAfter)
		}
	}
	return 0
}

// shortMatch caps an adapter's error for a reason: its first line, at
// most 120 bytes.
func shortMatch(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		cut := 120
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
