package feedback

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/supervisorhq/supervisor/shared/redact"
)

// ansiEscape matches terminal escape sequences: CSI sequences (colours,
// cursor moves), OSC sequences (titles, hyperlinks) ended by BEL or ST,
// and the two-byte escapes. An unfinished sequence at the very end is
// matched too.
var ansiEscape = regexp.MustCompile(`\x1b(?:\[[0-?]*[ -/]*[@-~]?|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[ -/]*[0-~]?)`)

// Sanitize makes text from the code under test safe to show an agent
// (FB-03, FB-04): terminal escapes, control characters other than newline
// and tab, and Unicode bidirectional controls are removed, carriage
// returns are resolved the way a terminal would show them (C22), invalid
// UTF-8 becomes U+FFFD, and secrets are masked with redact.String. It does
// not truncate; Build does that, keeping the end.
func Sanitize(s string) string {
	return redact.String(strip(s))
}

// strip is Sanitize without the redaction.
func strip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexByte(s, 0x1b) >= 0 {
		s = ansiEscape.ReplaceAllString(s, "")
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	if strings.IndexByte(s, '\r') >= 0 {
		s = resolveCR(s)
	}
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || isBidiControl(r) {
			return -1
		}
		return r
	}, s)
}

// isBidiControl reports the Unicode bidirectional formatting characters:
// the embeddings and overrides U+202A–U+202E, the isolates U+2066–U+2069,
// and the marks U+200E, U+200F and U+061C. They can make text read
// differently from what it is (the "Trojan Source" trick).
func isBidiControl(r rune) bool {
	return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) ||
		r == 0x200e || r == 0x200f || r == 0x061c
}

// resolveCR keeps, of each line, what follows its last carriage return
// (a progress bar's final state), or the line's last non-empty part when
// the return ends it.
func resolveCR(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.IndexByte(l, '\r') < 0 {
			continue
		}
		parts := strings.Split(l, "\r")
		keep := ""
		for j := len(parts) - 1; j >= 0; j-- {
			if parts[j] != "" {
				keep = parts[j]
				break
			}
		}
		lines[i] = keep
	}
	return strings.Join(lines, "\n")
}

// TrimMarker is the line put in front of a text whose beginning was cut
// to fit: the end of a log, where failures usually are, is what is kept.
const TrimMarker = "[… earlier output trimmed …]"

// snapBytes is how far keepTail looks for a line start.
const snapBytes = 160

// keepTail returns the last n bytes of s or fewer, cut at a rune boundary
// and, when a line break is near, at the start of a line, preceded by
// TrimMarker and a newline. s is returned as is when it fits; n <= 0 gives
// "". The result, marker included, is at most n+len(TrimMarker)+1 bytes.
func keepTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	// Start at a line when one begins soon enough: within the first
	// quarter of what is kept, and at most snapBytes away.
	if i := strings.IndexByte(s[cut:], '\n'); i >= 0 && i < min(n/4, snapBytes) {
		cut += i + 1
	}
	return TrimMarker + "\n" + s[cut:]
}

// keepHead returns the first n bytes of s or fewer, cut at a rune
// boundary, followed by "…" when anything was cut.
func keepHead(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// oneLine folds a text into one line, its runs of white space turned into
// single spaces, for lists where a line break could start a new item.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
