package feedback

import (
	"regexp"
	"strings"
)

var (
	// --- FAIL: TestDiv/by_zero (0.00s), indented by subtest depth without -v.
	goResult = regexp.MustCompile(`^(\s*)--- (FAIL|PASS|SKIP): (\S+) \(`)
	// === RUN   TestDiv/by_zero: with -v, the lines that follow are that test's.
	goRun = regexp.MustCompile(`^=== (RUN|CONT|NAME)\s+(\S+)`)
	// A t.Error/t.Log line: "    calc_test.go:25: message".
	goLog = regexp.MustCompile(`^(\s+)([^\s:]+\.go):(\d+): (.*)$`)
	// The header of a package's build errors: "# example.com/x [example.com/x.test]".
	goBuildHeader = regexp.MustCompile(`^# \[?([^\s\]]+)\]?(?: \[.*\])?$`)
	// A compiler or vet error: "./x.go:3:2: undefined: y" or "x/x.go:3:2: …".
	goBuildError = regexp.MustCompile(`^([^\s:]+\.go):(\d+)(?::\d+)?: (.*)$`)
	// A stack frame's location line: "\t/path/x_test.go:6 +0x1d".
	goFrame = regexp.MustCompile(`^\t(\S+\.go):(\d+)(?: \+0x[0-9a-f]+)?$`)
	// A test still running when the binary's -timeout fired.
	goRunning = regexp.MustCompile(`^\s+(\S+) \(\S+\)$`)
)

// goTest collects what the output says about one test.
type goTest struct {
	failed bool
	file   string
	line   int
	msgs   []string
}

// parseGo reads go test output. Without -v, a test's log lines follow its
// "--- FAIL" line, indented one level deeper than it; with -v they follow
// its "=== RUN" (or CONT, NAME) line. A panic belongs to the test running
// when it happened and is located at the first stack frame outside the
// runtime and testing packages. Compiler and vet errors under a "# package"
// header are failures named "package [build failed]".
func parseGo(lines []string) []TestFailure {
	tests := map[string]*goTest{}
	var failOrder []string
	get := func(name string) *goTest {
		t := tests[name]
		if t == nil {
			t = &goTest{}
			tests[name] = t
		}
		return t
	}
	var builds []TestFailure
	current := ""          // the test the next log line belongs to
	verbose := false       // an "=== RUN" line was seen
	byIndent := []string{} // without -v: the result line at each depth
	buildPkg := ""         // inside a "# package" block of build errors
	lastMsg := (*[]string)(nil)
	lastMsgIndent := 0

	for i := 0; i < len(lines); i++ {
		l := lines[i]
		// A "# package" header counts when errors (or vet's "# [package]") follow it.
		if m := goBuildHeader.FindStringSubmatch(l); m != nil && i+1 < len(lines) &&
			(goBuildError.MatchString(lines[i+1]) || goBuildHeader.MatchString(lines[i+1])) {
			buildPkg = m[1]
			lastMsg = nil
			continue
		}
		if buildPkg != "" {
			if m := goBuildError.FindStringSubmatch(l); m != nil {
				builds = append(builds, TestFailure{Name: buildPkg + " [build failed]", File: m[1], Line: atoi(m[2]), Message: m[3], Runner: RunnerGo})
				continue
			}
			if strings.HasPrefix(l, "\t") && len(builds) > 0 { // "\thave (int)" under the error
				builds[len(builds)-1].Message += "\n" + strings.TrimSpace(l)
				continue
			}
			buildPkg = ""
		}
		if m := goRun.FindStringSubmatch(l); m != nil {
			verbose = true
			current = m[2]
			lastMsg = nil
			continue
		}
		if m := goResult.FindStringSubmatch(l); m != nil {
			depth := len(m[1]) / 4
			if depth > len(byIndent) {
				depth = len(byIndent)
			}
			byIndent = append(byIndent[:depth], m[3])
			current = m[3]
			lastMsg = nil
			if m[2] == "FAIL" {
				t := get(m[3])
				if !t.failed {
					t.failed = true
					failOrder = append(failOrder, m[3])
				}
			}
			continue
		}
		if m := goLog.FindStringSubmatch(l); m != nil {
			owner := current
			if !verbose {
				if d := len(m[1])/4 - 1; d >= 0 && d < len(byIndent) {
					owner = byIndent[d]
				}
			}
			if owner == "" {
				continue
			}
			t := get(owner)
			if t.file == "" {
				t.file, t.line = m[2], atoi(m[3])
			}
			t.msgs = append(t.msgs, m[4])
			lastMsg, lastMsgIndent = &t.msgs, len(m[1])
			continue
		}
		if lastMsg != nil && strings.TrimSpace(l) != "" && indent(l) > lastMsgIndent {
			(*lastMsg)[len(*lastMsg)-1] += "\n" + strings.TrimSpace(l)
			continue
		}
		lastMsg = nil
		if msg, ok := strings.CutPrefix(l, "panic: "); ok {
			i = goPanic(lines, i, msg, current, get, &failOrder)
		}
	}

	var out []TestFailure
	for _, name := range failOrder {
		t := tests[name]
		out = append(out, TestFailure{Name: name, File: t.file, Line: t.line, Message: strings.Join(t.msgs, "\n"), Runner: RunnerGo})
	}
	return append(builds, dropParents(out, "/")...)
}

// goPanic records the panic that starts at lines[i] against the test that
// was running (or, for a -timeout panic, every test still running) and
// returns the index of the last line it read.
func goPanic(lines []string, i int, msg, current string, get func(string) *goTest, failOrder *[]string) int {
	fail := func(name string) *goTest {
		t := get(name)
		if !t.failed {
			t.failed = true
			*failOrder = append(*failOrder, name)
		}
		return t
	}
	msg = strings.TrimSuffix(strings.TrimSuffix(msg, " [recovered, repanicked]"), " [recovered]")
	if strings.HasPrefix(msg, "test timed out after ") {
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "running tests:"; j++ {
			if strings.HasPrefix(lines[j], "goroutine ") {
				return i
			}
		}
		for j++; j < len(lines); j++ {
			m := goRunning.FindStringSubmatch(lines[j])
			if m == nil {
				break
			}
			t := fail(m[1])
			t.msgs = append(t.msgs, "panic: "+msg)
		}
		return j - 1
	}
	if current == "" {
		return i
	}
	t := fail(current)
	t.msgs = append(t.msgs, "panic: "+msg)
	// The first goroutine's stack: "function(args)" then "\tfile:line +0x…".
	j := i + 1
	for ; j < len(lines) && !strings.HasPrefix(lines[j], "goroutine "); j++ {
		if strings.HasPrefix(lines[j], "--- ") || strings.HasPrefix(lines[j], "FAIL") {
			return j - 1
		}
	}
	for j++; j+1 < len(lines); j += 2 {
		fn, loc := lines[j], goFrame.FindStringSubmatch(lines[j+1])
		if loc == nil {
			break
		}
		if strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "testing.") || strings.HasPrefix(fn, "panic(") || strings.HasPrefix(fn, "created by ") {
			continue
		}
		t.file, t.line = loc[1], atoi(loc[2])
		break
	}
	return i
}
