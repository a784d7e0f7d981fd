package feedback

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/supervisorhq/supervisor/shared/redact"
)

// TestSanitize covers FB-03 and FB-04: terminal escapes, control and bidi
// characters go, carriage returns are resolved (C22), secrets are masked.
func TestSanitize(t *testing.T) {
	ghp := "ghp_" + strings.Repeat("a1B2", 9)
	tests := []struct {
		name, in, want string
	}{
		{"plain text", "ok\n\tindented", "ok\n\tindented"},
		{"colours", "\x1b[31mFAIL\x1b[0m \x1b[1;32mok\x1b[m", "FAIL ok"},
		{"cursor moves and erase", "a\x1b[2K\x1b[1Gb\x1b[?25l", "ab"},
		{"OSC title and hyperlink", "\x1b]0;title\x07see \x1b]8;;https://example.test\x1b\\link\x1b]8;;\x1b\\", "see link"},
		{"an escape cut off at the end", "tail\x1b[", "tail"},
		{"controls but newline and tab", "a\x00b\x07c\x08d\x7fe\u0085f\tg\nh", "abcdef\tg\nh"},
		{"bidi overrides and isolates", "if x \u202e}{\u202c \u2066y\u2069 \u200f\u200e\u061c", "if x }{ y "},
		{"CRLF", "one\r\ntwo\r\n", "one\ntwo\n"},
		{"progress bar", "10%\r50%\r100%\ndone", "100%\ndone"},
		{"a line ending in CR", "working\r\nnext\r", "working\nnext"},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"a secret", "password=hunter2 and " + ghp, "password=" + redact.Mask + " and " + redact.Mask},
		{"a secret hidden by an escape", "pass\x1b[0mword=hunter2", "password=" + redact.Mask},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Sanitize(tc.in); got != tc.want {
				t.Errorf("Sanitize(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestKeepTail covers C13: truncation keeps the end, marks the cut, and
// never splits a character.
func TestKeepTail(t *testing.T) {
	lines := make([]string, 200)
	for i := range lines {
		lines[i] = "line " + strings.Repeat("é", i%7) + string(rune('a'+i%26))
	}
	long := strings.Join(lines, "\n") + "\nFINAL: the failure"
	tests := []struct {
		name string
		s    string
		n    int
	}{
		{"fits", "short", 10},
		{"nothing kept", "short", 0},
		{"long text, small n", long, 100},
		{"long text, larger n", long, 1500},
		{"one long line of two-byte runes", strings.Repeat("é", 1000), 333},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := keepTail(tc.s, tc.n)
			switch {
			case len(tc.s) <= tc.n:
				if got != tc.s {
					t.Fatalf("keepTail changed a text that fits: %q", got)
				}
				return
			case tc.n <= 0:
				if got != "" {
					t.Fatalf("keepTail(…, 0) = %q", got)
				}
				return
			}
			body, ok := strings.CutPrefix(got, TrimMarker+"\n")
			if !ok {
				t.Fatalf("no marker line: %q", got[:40])
			}
			if len(body) > tc.n || !strings.HasSuffix(tc.s, body) || !utf8.ValidString(body) {
				t.Errorf("kept %d bytes (limit %d), suffix %v, valid %v", len(body), tc.n, strings.HasSuffix(tc.s, body), utf8.ValidString(body))
			}
			if strings.Contains(tc.s, "FINAL") && !strings.HasSuffix(body, "FINAL: the failure") {
				t.Errorf("the end is lost: %q", body)
			}
			if strings.Contains(tc.s, "\n") && strings.HasPrefix(body, "ine") {
				t.Errorf("cut inside a line when a line start was near: %q", body[:20])
			}
		})
	}
}

func TestKeepHead(t *testing.T) {
	if got := keepHead("héllo", 2); got != "h…" {
		t.Errorf("keepHead split a rune or kept too much: %q", got)
	}
	if got := keepHead("abc", 3); got != "abc" {
		t.Errorf("keepHead changed a text that fits: %q", got)
	}
}
