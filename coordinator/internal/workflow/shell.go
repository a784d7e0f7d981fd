package workflow

import (
	"path"
	"strings"
)

// shells are the programs ShellCommand treats as shells.
var shells = map[string]bool{
	"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true,
	"ash": true, "mksh": true, "fish": true, "csh": true, "tcsh": true,
}

// wrapper describes a program that runs another command given after its
// own options, so a shell may hide behind it.
type wrapper struct {
	// argShort lists the short options that take an argument.
	argShort string
	// argLong lists the long options that take the next word as argument
	// when not written --opt=value.
	argLong []string
	// operands is how many operands precede the command (timeout's duration).
	operands int
}

var wrappers = map[string]wrapper{
	"env":     {argShort: "uCS", argLong: []string{"--unset", "--chdir", "--split-string"}},
	"nice":    {argShort: "n", argLong: []string{"--adjustment"}},
	"timeout": {argShort: "sk", argLong: []string{"--signal", "--kill-after"}, operands: 1},
	"xargs": {argShort: "adEILnPs", argLong: []string{
		"--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-chars", "--process-slot-var",
	}},
	"nohup":  {},
	"stdbuf": {argShort: "ioe", argLong: []string{"--input", "--output", "--error"}},
}

// maxUnwrap bounds how many wrappers ShellCommand looks through.
const maxUnwrap = 32

// ShellCommand reports whether argv runs a shell with -c (sh, bash, zsh,
// dash, ksh and a few others), either directly or behind the wrappers env,
// nice, timeout, xargs, nohup and stdbuf with their options, and names the
// shell. Commands are argv lists executed without a shell, so such a
// command is rejected at load (DESIGN decision 4).
func ShellCommand(argv []string) (string, bool) {
	for range maxUnwrap {
		if len(argv) == 0 {
			return "", false
		}
		prog := path.Base(argv[0])
		if shells[prog] {
			return prog, shellHasC(argv[1:])
		}
		w, ok := wrappers[prog]
		if !ok {
			return "", false
		}
		rest, split := w.skip(prog, argv[1:])
		if split != nil {
			// env -S splits its argument into words that come first.
			rest = append(split, rest...)
		}
		argv = rest
	}
	return "", false
}

// skip returns the words after the wrapper's options and operands, and for
// env -S the split string's words.
func (w wrapper) skip(prog string, args []string) (rest, split []string) {
	i := 0
	setSplit := func(s string) { split = strings.Fields(s) }
options:
	for i < len(args) {
		a := args[i]
		switch {
		case a == "--":
			i++
			break options
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a, "=")
			takesArg := contains(w.argLong, name)
			if takesArg && !hasVal && i+1 < len(args) {
				val = args[i+1]
				i++
			}
			if prog == "env" && name == "--split-string" {
				setSplit(val)
			}
			i++
		case len(a) > 1 && a[0] == '-':
			i++
			for k := 1; k < len(a); k++ {
				c := a[k]
				if k == 1 && c >= '0' && c <= '9' {
					break // nice -10
				}
				if strings.IndexByte(w.argShort, c) < 0 {
					continue
				}
				val := a[k+1:]
				if val == "" && i < len(args) {
					val = args[i]
					i++
				}
				if prog == "env" && c == 'S' {
					setSplit(val)
				}
				break
			}
		default:
			break options
		}
	}
	if prog == "env" {
		for i < len(args) && strings.Contains(args[i], "=") {
			i++
		}
	}
	i += w.operands
	if i > len(args) {
		i = len(args)
	}
	return args[i:], split
}

// shellHasC reports whether a shell's options (before its first operand,
// the script) include -c.
func shellHasC(args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || a == "-":
			return false
		case strings.HasPrefix(a, "--"):
			if a == "--command" || strings.HasPrefix(a, "--command=") {
				return true // fish
			}
			if a == "--rcfile" || a == "--init-file" {
				i++
			}
		case len(a) > 1 && (a[0] == '-' || a[0] == '+'):
			for k := 1; k < len(a); k++ {
				switch a[k] {
				case 'c':
					if a[0] == '-' {
						return true
					}
				case 'o', 'O':
					if k == len(a)-1 {
						i++
					}
				}
			}
		default:
			return false
		}
	}
	return false
}
