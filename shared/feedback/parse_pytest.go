package feedback

import (
	"regexp"
	"strings"
)

var (
	// The short test summary: "FAILED tests/test_x.py::test_y - AssertionError: …".
	pySummary = regexp.MustCompile(`^(?:FAILED|ERROR) (\S+\.py(?:::\S.*?)?)(?: - (.*))?$`)
	// The banners of the FAILURES and ERRORS sections, and of any other.
	pySectionStart = regexp.MustCompile(`^={3,} (?:FAILURES|ERRORS) ={3,}$`)
	pyBanner       = regexp.MustCompile(`^={3,}`)
	// One failure's header inside a section: "____ TestGreeting.test_hello ____".
	pyHeader = regexp.MustCompile(`^_{3,} (.+?) _{3,}$`)
	// A traceback location: "tests/test_x.py:12: AssertionError".
	pyLocation = regexp.MustCompile(`^(\S+\.py):(\d+):(?: (.*))?$`)
)

// pyBlock is one failure's traceback in the FAILURES or ERRORS section.
type pyBlock struct {
	key       string // the header's name, dots outside brackets turned into "::"
	errLines  []string
	locations []TestFailure // File, Line and Message (the exception's name)
}

// parsePytest reads pytest's FAILURES/ERRORS sections and its short test
// summary. With a summary, the failures are its FAILED and ERROR lines in
// order, each completed from its traceback: the "E" lines as the message
// and the traceback's location in the test's own file (or its last one).
// Without a summary, the tracebacks alone give the failures. Names are the
// node ids without the file: test_add, test_add_table[1-1-2],
// TestGreeting::test_hello.
func parsePytest(lines []string) []TestFailure {
	var blocks []*pyBlock
	byKey := map[string]*pyBlock{}
	var cur *pyBlock
	inSection := false
	type summary struct{ file, name, msg string }
	var sums []summary
	for _, l := range lines {
		switch {
		case pySectionStart.MatchString(l):
			inSection, cur = true, nil
			continue
		case pyBanner.MatchString(l):
			inSection, cur = false, nil
			continue
		}
		if m := pySummary.FindStringSubmatch(l); m != nil {
			file, name, _ := strings.Cut(m[1], "::")
			sums = append(sums, summary{file, name, m[2]})
			continue
		}
		if !inSection {
			continue
		}
		if m := pyHeader.FindStringSubmatch(l); m != nil {
			cur = &pyBlock{key: pyHeaderKey(m[1])}
			blocks = append(blocks, cur)
			if byKey[cur.key] == nil {
				byKey[cur.key] = cur
			}
			continue
		}
		if cur == nil {
			continue
		}
		if rest, ok := strings.CutPrefix(l, "E "); ok || l == "E" {
			cur.errLines = append(cur.errLines, rest)
			continue
		}
		if m := pyLocation.FindStringSubmatch(l); m != nil {
			cur.locations = append(cur.locations, TestFailure{File: m[1], Line: atoi(m[2]), Message: m[3]})
		}
	}

	var out []TestFailure
	if len(sums) > 0 {
		for _, s := range sums {
			f := TestFailure{Name: s.name, File: s.file, Message: s.msg, Runner: RunnerPytest}
			if f.Name == "" { // a module that failed to import: "ERROR tests/test_x.py - …"
				f.Name = s.file
			}
			key := s.name
			if key == "" {
				key = s.file
			}
			if b := byKey[key]; b != nil {
				pyComplete(&f, b)
			}
			out = append(out, f)
		}
		return out
	}
	for _, b := range blocks {
		f := TestFailure{Name: b.key, Runner: RunnerPytest}
		pyComplete(&f, b)
		out = append(out, f)
	}
	return out
}

// pyComplete fills a failure's location and message from its traceback.
func pyComplete(f *TestFailure, b *pyBlock) {
	if len(b.locations) > 0 {
		loc := b.locations[len(b.locations)-1]
		for _, l := range b.locations {
			if l.File == f.File || (f.File == "" && looksLikePyTest(l.File)) {
				loc = l
				break
			}
		}
		f.File, f.Line = loc.File, loc.Line
		if f.Message == "" {
			f.Message = b.locations[len(b.locations)-1].Message
		}
	}
	if len(b.errLines) > 0 {
		f.Message = dedent(b.errLines)
	}
}

// looksLikePyTest reports whether a path names a pytest test module.
func looksLikePyTest(path string) bool {
	base := path[strings.LastIndexByte(path, '/')+1:]
	return strings.HasPrefix(base, "test_") || strings.HasSuffix(base, "_test.py")
}

// pyHeaderKey turns a traceback header into the summary's name: "ERROR at
// setup of test_x" is test_x, "ERROR collecting tests/test_x.py" is the
// file, and TestGreeting.test_hello is TestGreeting::test_hello (dots
// inside a parameter id's brackets stay).
func pyHeaderKey(h string) string {
	for _, p := range []string{"ERROR at setup of ", "ERROR at teardown of ", "ERROR collecting "} {
		if rest, ok := strings.CutPrefix(h, p); ok {
			return rest
		}
	}
	if strings.Contains(h, "/") { // a path, not a name
		return h
	}
	var b strings.Builder
	depth := 0
	for _, r := range h {
		switch {
		case r == '[':
			depth++
		case r == ']' && depth > 0:
			depth--
		case r == '.' && depth == 0:
			b.WriteString("::")
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
