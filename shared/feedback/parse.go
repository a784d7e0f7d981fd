package feedback

import (
	"strconv"
	"strings"
)

// Runner names in TestFailure.Runner.
const (
	RunnerGo     = "go"
	RunnerPytest = "pytest"
	RunnerNode   = "node"
	RunnerJest   = "jest"
	RunnerCargo  = "cargo"
)

// TestFailure is one failing test (or build error) found in a gate's
// output by ParseTests (FB-09).
type TestFailure struct {
	// Name is the test as its runner names it: TestDiv/by_zero,
	// TestGreeting::test_hello, "parsePort > rejects letters",
	// "add › adds two numbers", tests::adds. A build error is named
	// "PACKAGE [build failed]" (or "[build failed]" when the package is
	// not known).
	Name string `json:"name"`
	// File and Line locate the failure as the runner printed them (a
	// path relative to the package or project, or an absolute one from
	// a stack trace); both are empty when the output did not say.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Message is what the runner said about the failure, its first
	// maxMessageBytes bytes.
	Message string `json:"message,omitempty"`
	// Runner is the test runner whose output format was recognised: one
	// of RunnerGo, RunnerPytest, RunnerNode, RunnerJest, RunnerCargo.
	Runner string `json:"runner"`
}

// Location is File:Line, File alone, or "" when neither is known.
func (t TestFailure) Location() string {
	switch {
	case t.File == "":
		return ""
	case t.Line > 0:
		return t.File + ":" + strconv.Itoa(t.Line)
	}
	return t.File
}

// maxMessageBytes caps TestFailure.Message; maxParsed caps how many
// failures ParseTests returns.
const (
	maxMessageBytes = 1000
	maxParsed       = 200
)

// ParseTests finds failing tests in the output of go test (with or
// without -v; panics and build failures included), pytest, node --test
// (its TAP and spec reporters), jest and cargo test (FB-09, S-8.2). The
// output is sanitized first (Sanitize). Failures come in the order the
// runners reported them, runner by runner in the order just listed, each
// at most once; output in none of these formats gives nil, and the raw
// output is then all the agent gets.
func ParseTests(output string) []TestFailure {
	return parseSanitized(Sanitize(output))
}

// parseSanitized is ParseTests for output already sanitized.
func parseSanitized(output string) []TestFailure {
	lines := strings.Split(output, "\n")
	var all []TestFailure
	for _, parse := range []func([]string) []TestFailure{parseGo, parsePytest, parseNodeTAP, parseNodeSpec, parseJest, parseCargo} {
		all = append(all, parse(lines)...)
	}
	seen := make(map[TestFailure]bool, len(all))
	out := all[:0]
	for _, f := range all {
		f.Message = keepHead(strings.TrimSpace(f.Message), maxMessageBytes)
		if f.Name == "" || seen[f] {
			continue
		}
		seen[f] = true
		out = append(out, f)
		if len(out) == maxParsed {
			break
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// indent is the number of leading spaces and tabs of a line.
func indent(l string) int {
	return len(l) - len(strings.TrimLeft(l, " \t"))
}

// atoi is strconv.Atoi without the error: 0 for anything but digits.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// dropParents removes the failures that only report that their children
// failed: no message of their own, and another failure's name starts with
// theirs followed by sep.
func dropParents(fs []TestFailure, sep string) []TestFailure {
	out := fs[:0]
	for i, f := range fs {
		parent := false
		if f.Message == "" {
			for j, g := range fs {
				if j != i && strings.HasPrefix(g.Name, f.Name+sep) {
					parent = true
					break
				}
			}
		}
		if !parent {
			out = append(out, f)
		}
	}
	return out
}

// dedent removes the indentation the non-blank lines share and the blank
// lines at both ends, and joins the lines.
func dedent(lines []string) string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := indent(l); common < 0 || n < common {
			common = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) >= common && common > 0 {
			l = l[common:]
		}
		out[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(out, "\n")
}
