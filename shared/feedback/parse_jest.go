package feedback

import (
	"regexp"
	"strings"
)

var (
	// "FAIL src/x.test.js" (or PASS) opens a test file's report.
	jestFile = regexp.MustCompile(`^(?:FAIL|PASS) (\S+)`)
	// "  ● describe › test" opens one failure's block.
	jestBullet = regexp.MustCompile(`^(\s*)● (.+)$`)
	// "    ✕ test (4 ms)" is a failing test in the file's list.
	jestCross = regexp.MustCompile(`^\s*✕ (.+?)(?: \(\d+(?:\.\d+)? ?m?s\))?$`)
	// A line of a code frame: "    > 11 |   expect(…)" or "         |   ^".
	jestCodeFrame = regexp.MustCompile(`^\s*>?\s*\d*\s+\|`)
	// The end of the per-file reports.
	jestSummary = regexp.MustCompile(`^(?:Test Suites:|Tests:|Summary of all failing tests)`)
)

// parseJest reads jest's default reporter. Each "● describe › test" block
// is a failure (the "● Console" blocks of captured logs are not): its
// message is the block's text before the code frame and stack, its
// location the first "at" frame in the test file the block belongs to,
// else the first frame outside node_modules. Names keep jest's " › ".
// When the output has no "●" blocks, the "✕" lines give names alone.
func parseJest(lines []string) []TestFailure {
	var out, crosses []TestFailure
	file := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := jestFile.FindStringSubmatch(l); m != nil {
			file = m[1]
			continue
		}
		if jestSummary.MatchString(l) {
			file = ""
			continue
		}
		if file == "" {
			continue
		}
		if m := jestCross.FindStringSubmatch(l); m != nil {
			crosses = append(crosses, TestFailure{Name: m[1], File: file, Runner: RunnerJest})
			continue
		}
		m := jestBullet.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var block []string
		for i+1 < len(lines) && !jestBullet.MatchString(lines[i+1]) && !jestFile.MatchString(lines[i+1]) && !jestSummary.MatchString(lines[i+1]) {
			i++
			block = append(block, lines[i])
		}
		if m[2] == "Console" {
			continue
		}
		f := TestFailure{Name: m[2], Runner: RunnerJest}
		if f.Name == "Test suite failed to run" { // the file did not load: name the file
			f.Name = file + " › " + f.Name
		}
		var msg []string
		for _, b := range block {
			if jestCodeFrame.MatchString(b) || strings.HasPrefix(strings.TrimSpace(b), "at ") {
				break
			}
			msg = append(msg, b)
		}
		f.Message = dedent(msg)
		if p, n, ok := firstFrameIn(block, file); ok {
			f.File, f.Line = p, n
		} else if p, n, ok := firstOwnFrame(block); ok {
			f.File, f.Line = p, n
		} else {
			f.File = file
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return crosses
	}
	return out
}
