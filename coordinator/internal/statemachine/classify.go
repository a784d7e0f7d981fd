package statemachine

import (
	"regexp"
	"strconv"
	"strings"
	"time"

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

// classifyAgent classifies a failed agent round: its class, the text that
// decided it ("" when nothing matched), and a retry-after the agent
// reported (0 if none). A timeout of the agent's own run is fixable: the
// agent took too long, which another round may not.
func classifyAgent(a *protocol.AgentResult) (ErrorClass, string, time.Duration) {
	if a == nil || a.Status == protocol.AgentTimeout {
		return Fixable, "", 0
	}
	text := strings.Join([]string{a.Error, a.Stderr, a.Stdout}, "\n")
	for _, p := range classPatterns {
		if m := p.re.FindString(text); m != "" {
			var after time.Duration
			if p.class == Transient {
				if s := retryAfterRE.FindStringSubmatch(text); s != nil {
					if secs, err := strconv.Atoi(s[1]); err == nil {
						after = min(time.Duration(secs)*time.Second, maxRetryAfter)
					}
				}
			}
			return p.class, strings.ToLower(m), after
		}
	}
	return Fixable, "", 0
}
