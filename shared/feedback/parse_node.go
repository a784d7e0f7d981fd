package feedback

import (
	"regexp"
	"strings"
)

var (
	// TAP: "# Subtest: name" opens a test, "not ok 2 - name" fails it;
	// a "# TODO" or "# SKIP" directive makes a "not ok" no failure.
	tapSubtest = regexp.MustCompile(`^(\s*)# Subtest: (.*)$`)
	tapNotOK   = regexp.MustCompile(`^(\s*)not ok \d+(?: -)?(?: (.*?))?$`)
	tapSkip    = regexp.MustCompile(`(?i) # (?:TODO|SKIP)\b`)
	// A key of the YAML block under a test line: "  location: '…'".
	tapKey = regexp.MustCompile(`^(\s*)([A-Za-z_]+):(?: (.*))?$`)
	// A stack frame, in a V8 stack ("at fn (file:1:2)", "at file:1:2") or
	// in TAP's stack block ("fn (file:1:2)").
	jsFrame = regexp.MustCompile(`^\s*(?:at )?(?:.*? \()?((?:file://)?[^\s()]+?):(\d+):(\d+)\)?(?: \{)?$`)
	// Node's spec reporter: "✖ name (1.2ms)" fails, "▶ name" opens a suite.
	specFail  = regexp.MustCompile(`^(\s*)✖ (.+?)(?: \([\d.]+m?s\))?$`)
	specSuite = regexp.MustCompile(`^(\s*)▶ (.+?)(?: \([\d.]+m?s\))?$`)
)

// parseNodeTAP reads node --test's TAP output (Node 20's reporter when
// stdout is not a terminal; other TAP producers are read the same way).
// A failure is named by its enclosing subtests and itself joined with
// " > ", and located at the first stack frame in the test's file, else at
// the test's location. Failures that only say a subtest failed are left
// out.
func parseNodeTAP(lines []string) []TestFailure {
	var out []TestFailure
	var names []string // the open "# Subtest:" names, by depth (4 spaces a level)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := tapSubtest.FindStringSubmatch(l); m != nil {
			d := len(m[1]) / 4
			if d > len(names) {
				d = len(names)
			}
			names = append(names[:d], m[2])
			continue
		}
		m := tapNotOK.FindStringSubmatch(l)
		if m == nil || tapSkip.MatchString(l) {
			continue
		}
		d := len(m[1]) / 4
		if d > len(names) {
			d = len(names)
		}
		f := TestFailure{Name: strings.Join(append(append([]string{}, names[:d]...), m[2]), " > "), Runner: RunnerNode}
		var keys map[string]string
		keys, i = tapYAML(lines, i+1, len(m[1]))
		if keys["failureType"] == "subtestsFailed" {
			continue
		}
		f.Message = keys["error"]
		if n := keys["name"]; n != "" && !strings.HasPrefix(f.Message, n) {
			f.Message = n + ": " + f.Message
		}
		f.File, f.Line = jsLocation(keys["location"])
		if file, line, ok := firstFrameIn(strings.Split(keys["stack"], "\n"), f.File); ok {
			f.File, f.Line = file, line
		}
		out = append(out, f)
	}
	return out
}

// tapYAML reads the YAML block ("---" … "...") that may follow a test line
// at index i, indented two more than the test line's indent ind. It returns
// the top-level keys (quoted scalars unquoted, block scalars dedented) and
// the index of the block's last line (i-1 when there is no block).
func tapYAML(lines []string, i, ind int) (map[string]string, int) {
	keys := map[string]string{}
	if i >= len(lines) || strings.TrimSpace(lines[i]) != "---" || indent(lines[i]) != ind+2 {
		return keys, i - 1
	}
	for i++; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "..." && indent(l) == ind+2 {
			return keys, i
		}
		m := tapKey.FindStringSubmatch(l)
		if m == nil || len(m[1]) != ind+2 {
			continue
		}
		v := m[3]
		if v == "|-" || v == "|" || v == ">-" || v == ">" {
			var block []string
			for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || indent(lines[i+1]) > ind+2) {
				i++
				block = append(block, lines[i])
			}
			v = dedent(block)
		} else if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = strings.ReplaceAll(v[1:len(v)-1], "''", "'")
		} else if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		keys[m[2]] = v
	}
	return keys, len(lines) - 1
}

// jsLocation splits "file:line:col" (a file:// URL or a path).
func jsLocation(s string) (string, int) {
	m := jsFrame.FindStringSubmatch(s)
	if m == nil {
		return "", 0
	}
	return strings.TrimPrefix(m[1], "file://"), atoi(m[2])
}

// firstFrameIn finds the first stack frame in file, or when file is "" the
// first frame in a file that looks like a test; frames inside node itself
// (node:…) and node_modules never count.
func firstFrameIn(frames []string, file string) (string, int, bool) {
	for _, fr := range frames {
		m := jsFrame.FindStringSubmatch(fr)
		if m == nil {
			continue
		}
		path := strings.TrimPrefix(m[1], "file://")
		if strings.HasPrefix(path, "node:") || strings.Contains(path, "node_modules/") {
			continue
		}
		if path == file || (file == "" && looksLikeJSTest(path)) {
			return path, atoi(m[2]), true
		}
	}
	return "", 0, false
}

// firstOwnFrame is the first frame outside node and node_modules.
func firstOwnFrame(frames []string) (string, int, bool) {
	for _, fr := range frames {
		m := jsFrame.FindStringSubmatch(fr)
		if m == nil {
			continue
		}
		path := strings.TrimPrefix(m[1], "file://")
		if !strings.HasPrefix(path, "node:") && !strings.Contains(path, "node_modules/") {
			return path, atoi(m[2]), true
		}
	}
	return "", 0, false
}

// looksLikeJSTest reports whether a path names a JavaScript or TypeScript
// test file: *.test.*, *.spec.*, *_test.*, test-*, or one under a test,
// tests or __tests__ directory.
func looksLikeJSTest(path string) bool {
	base := path[strings.LastIndexByte(path, '/')+1:]
	return strings.Contains(base, ".test.") || strings.Contains(base, ".spec.") ||
		strings.Contains(base, "_test.") || strings.HasPrefix(base, "test-") ||
		strings.Contains(path, "/test/") || strings.Contains(path, "/tests/") || strings.Contains(path, "__tests__/") ||
		strings.HasPrefix(path, "test/") || strings.HasPrefix(path, "tests/")
}

// parseNodeSpec reads node --test's spec reporter (the default on a
// terminal). Each "✖ name" line is followed by its error, indented deeper;
// names join the enclosing "▶" suites with " > ". The "✖ failing tests:"
// recap at the end repeats the failures and is read only when nothing
// came before it (the start of the output was cut).
func parseNodeSpec(lines []string) []TestFailure {
	recap := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "✖ failing tests:" {
			recap = i
			break
		}
	}
	body := lines
	if recap >= 0 {
		body = lines[:recap]
	}
	out := specFailures(body)
	if len(out) == 0 && recap >= 0 {
		out = specFailures(lines[recap+1:])
	}
	return dropParents(out, " > ")
}

// specFailures reads the "✖" entries of a spec report.
func specFailures(lines []string) []TestFailure {
	var out []TestFailure
	var suites []string // "▶" names by depth (2 spaces a level)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := specSuite.FindStringSubmatch(l); m != nil {
			d := min(len(m[1])/2, len(suites))
			suites = append(suites[:d], m[2])
			continue
		}
		m := specFail.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		d := min(len(m[1])/2, len(suites))
		suites = suites[:d]
		f := TestFailure{Name: strings.Join(append(append([]string{}, suites...), m[2]), " > "), Runner: RunnerNode}
		var block []string
		for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || indent(lines[i+1]) > len(m[1])) {
			i++
			block = append(block, lines[i])
		}
		var msg []string
		for _, b := range block {
			if strings.HasPrefix(strings.TrimSpace(b), "at ") {
				break
			}
			msg = append(msg, b)
		}
		f.Message = dedent(msg)
		if file, line, ok := firstFrameIn(block, ""); ok {
			f.File, f.Line = file, line
		} else if file, line, ok := firstOwnFrame(block); ok {
			f.File, f.Line = file, line
		}
		out = append(out, f)
	}
	return out
}
