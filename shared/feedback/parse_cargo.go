package feedback

import (
	"regexp"
	"strings"
)

var (
	// "test tests::adds ... FAILED", or "tests::adds --- FAILED" with -q.
	cargoFailed = regexp.MustCompile(`^(?:test (\S+) \.\.\. FAILED|(\S+) --- FAILED)$`)
	// "---- tests::adds stdout ----" opens a failed test's captured output.
	cargoSection = regexp.MustCompile(`^---- (\S+) stdout ----$`)
	// "thread 'tests::adds' (2906) panicked at src/lib.rs:15:9:" (Rust 1.73
	// and later: the message follows on the next lines), or before 1.73
	// "thread 'x' panicked at 'message', src/lib.rs:15:9".
	cargoPanic    = regexp.MustCompile(`^thread '[^']*'(?: \(\d+\))? panicked at (\S+?):(\d+):(\d+):$`)
	cargoPanicOld = regexp.MustCompile(`^thread '[^']*'(?: \(\d+\))? panicked at '(.*)', (\S+?):(\d+):(\d+)$`)
	// The "failures:" list: "    tests::adds".
	cargoListed = regexp.MustCompile(`^    (\S+)$`)
	// A compiler error and, on the next line, its location.
	cargoError     = regexp.MustCompile(`^error(?:\[(E\d+)\])?: (.*)$`)
	cargoErrorAt   = regexp.MustCompile(`^\s*--> (\S+?):(\d+):(\d+)$`)
	cargoNoCompile = regexp.MustCompile("^error: could not compile `([^`]+)`")
)

// parseCargo reads cargo test: the tests marked FAILED or listed under
// "failures:", each completed from its "---- name stdout ----" section
// with the panic's location and message. Compiler errors (an "error[E…]"
// line followed by "--> file:line:col") are failures named "CRATE [build
// failed]".
func parseCargo(lines []string) []TestFailure {
	var order []string
	byName := map[string]*TestFailure{}
	add := func(name string) *TestFailure {
		if f := byName[name]; f != nil {
			return f
		}
		byName[name] = &TestFailure{Name: name, Runner: RunnerCargo}
		order = append(order, name)
		return byName[name]
	}
	var builds []TestFailure
	crate := ""
	inList := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := cargoFailed.FindStringSubmatch(l); m != nil {
			add(m[1] + m[2])
			continue
		}
		if l == "failures:" {
			inList = true
			continue
		}
		if m := cargoSection.FindStringSubmatch(l); m != nil {
			inList = false
			f := add(m[1])
			i = cargoPanicAt(lines, i+1, f)
			continue
		}
		if inList {
			if m := cargoListed.FindStringSubmatch(l); m != nil {
				add(m[1])
				continue
			}
			if strings.TrimSpace(l) != "" {
				inList = false
			}
		}
		if m := cargoNoCompile.FindStringSubmatch(l); m != nil && crate == "" {
			crate = m[1]
			continue
		}
		if m := cargoError.FindStringSubmatch(l); m != nil && i+1 < len(lines) {
			if at := cargoErrorAt.FindStringSubmatch(lines[i+1]); at != nil {
				msg := m[2]
				if m[1] != "" {
					msg = m[1] + ": " + msg
				}
				builds = append(builds, TestFailure{File: at[1], Line: atoi(at[2]), Message: msg, Runner: RunnerCargo})
				i++
			}
		}
	}
	for i := range builds {
		builds[i].Name = strings.TrimSpace(crate + " [build failed]")
	}
	out := builds
	for _, name := range order {
		out = append(out, *byName[name])
	}
	return out
}

// cargoPanicAt reads a test's captured output from lines[i] to the next
// section or the "failures:" list, filling f's location and message from
// its panic, and returns the index of the last line it read.
func cargoPanicAt(lines []string, i int, f *TestFailure) int {
	for ; i < len(lines); i++ {
		l := lines[i]
		if cargoSection.MatchString(l) || l == "failures:" {
			return i - 1
		}
		if m := cargoPanicOld.FindStringSubmatch(l); m != nil && f.File == "" {
			f.File, f.Line, f.Message = m[2], atoi(m[3]), m[1]
			continue
		}
		m := cargoPanic.FindStringSubmatch(l)
		if m == nil || f.File != "" {
			continue
		}
		f.File, f.Line = m[1], atoi(m[2])
		var msg []string
		for i+1 < len(lines) {
			next := lines[i+1]
			if strings.TrimSpace(next) == "" || strings.HasPrefix(next, "note: ") || next == "stack backtrace:" || cargoSection.MatchString(next) {
				break
			}
			i++
			msg = append(msg, next)
		}
		f.Message = strings.Join(msg, "\n")
	}
	return i - 1
}
