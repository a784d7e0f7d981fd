package gates

import (
	"path"
	"regexp"
	"strings"
)

// Inline code (CM-10). Besides shells, many programs run code given on
// their command line or read from standard input rather than from a
// repository file: python -c, perl -e, ruby -e, node -e, php -r, lua -e,
// Rscript -e, an awk program calling system() or piping to a command,
// make --eval, a makefile or script read from /dev/stdin. Like sh -c they
// need allow_shell. A script or makefile in the repository stays allowed:
// it is repository code, like a test.

// stdinPathRE matches operands that name standard input or another
// inherited descriptor rather than a file: -, /dev/stdin, /dev/fd/N,
// /proc/self/fd/N, /proc/PID/fd/N, /dev/tty.
var stdinPathRE = regexp.MustCompile(`^(-|/dev/stdin|/dev/tty|/dev/fd/[0-9]+|/proc/(self|thread-self|[0-9]+)/fd/[0-9]+)$`)

// isStdinPath reports whether a script or makefile operand reads standard
// input or an inherited descriptor (CM-10).
func isStdinPath(s string) bool {
	if s == "-" {
		return true
	}
	s = strings.ReplaceAll(s, `\`, "/")
	if strings.HasPrefix(s, "/") {
		s = path.Clean(s)
	}
	return stdinPathRE.MatchString(s)
}

// interpreter describes a language runtime's command line.
type interpreter struct {
	// inline are the short option letters whose value is program text
	// (python's c, perl's e and E).
	inline string
	// inlineLong are long options whose value is program text (--eval).
	inlineLong []string
	// argShort are short options taking a value: the rest of the word, or
	// the next word when the rest is empty.
	argShort string
	// attached are short options whose value, if any, is only ever the
	// rest of the word (perl -Mstrict, -i.bak).
	attached string
	// digits are short options followed by optional digits, after which
	// the cluster goes on (perl -l, -0777: -lne is -l -n -e).
	digits string
	// argLong are long options taking the next word as value when not
	// written --opt=value.
	argLong []string
	// clusters: short options may be combined (perl -lne, python -Sc).
	clusters bool
	// module are short options naming a module to run (python -m): what
	// follows is that module's arguments, not a script.
	module string
	// interactive are short options that read commands from standard
	// input (python -i).
	interactive string
	// stdin: with no script operand the program reads its code from
	// standard input.
	stdin bool
	// subcommand is a first word that makes the next word program text
	// (deno eval).
	subcommand string
}

var interpreters = map[string]interpreter{
	"python": {inline: "c", argShort: "WX", clusters: true, module: "m", interactive: "i", stdin: true,
		argLong: []string{"--check-hash-based-pycs"}},
	"perl": {inline: "eE", attached: "IMmixFdDV", digits: "0lC", clusters: true, stdin: true},
	"ruby": {inline: "e", argShort: "IrCEF", attached: "xiK", digits: "0WT", clusters: true, stdin: true,
		argLong: []string{"--encoding", "--external-encoding", "--internal-encoding"}},
	"node": {inline: "ep", inlineLong: []string{"--eval", "--print"}, argShort: "rC", clusters: true, stdin: true,
		argLong: []string{"--require", "--import", "--loader", "--experimental-loader", "--conditions",
			"--input-type", "--env-file", "--title", "--inspect-port"}},
	"bun":       {inline: "ep", inlineLong: []string{"--eval", "--print"}, argShort: "r", argLong: []string{"--preload", "--cwd", "--config"}},
	"deno":      {subcommand: "eval"},
	"php":       {inline: "rBRE", argShort: "cdzF", clusters: true, stdin: true},
	"lua":       {inline: "e", argShort: "l", stdin: true},
	"luajit":    {inline: "e", argShort: "lj", stdin: true},
	"rscript":   {inline: "e", stdin: false},
	"r":         {inline: "e", stdin: true},
	"tclsh":     {stdin: true},
	"wish":      {stdin: true},
	"osascript": {inline: "e", argShort: "ls", stdin: true},
}

// pythonRE matches python, python3, python3.12, pypy3.
var pythonRE = regexp.MustCompile(`^(python|pypy)[0-9.]*$`)

// nodeRE matches node and nodejs, also versioned (node18).
var nodeRE = regexp.MustCompile(`^nodej?s?[0-9.]*$`)

// lookupInterpreter finds the interpreter a normalized program name runs.
func lookupInterpreter(prog string) (interpreter, bool) {
	switch {
	case pythonRE.MatchString(prog):
		return interpreters["python"], true
	case nodeRE.MatchString(prog):
		return interpreters["node"], true
	case strings.HasPrefix(prog, "perl") && strings.Trim(prog[4:], "0123456789.") == "":
		return interpreters["perl"], true
	case strings.HasPrefix(prog, "ruby") && strings.Trim(prog[4:], "0123456789.") == "":
		return interpreters["ruby"], true
	case strings.HasPrefix(prog, "php") && strings.Trim(prog[3:], "0123456789.") == "":
		return interpreters["php"], true
	case strings.HasPrefix(prog, "lua") && prog != "luajit" && strings.Trim(prog[3:], "0123456789.") == "":
		return interpreters["lua"], true
	}
	in, ok := interpreters[prog]
	return in, ok
}

// inlineCode reports whether args (after the interpreter's name) give it
// program text: an inline option, or, when stdinToo, no script at all or
// a script read from standard input. desc describes it ("-c", "reading
// its program from standard input").
func (in interpreter) inlineCode(args []string, stdinToo bool) (desc string, ok bool) {
	if in.subcommand != "" {
		if len(args) > 0 && args[0] == in.subcommand {
			return in.subcommand, true
		}
		return "", false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return in.script(args[i+1], stdinToo)
			}
			return stdinDesc(in.stdin && stdinToo)
		case a == "-":
			return stdinDesc(stdinToo)
		case strings.HasPrefix(a, "--"):
			name, _, hasVal := strings.Cut(a, "=")
			if contains(in.inlineLong, name) {
				return name, true
			}
			if contains(in.argLong, name) && !hasVal {
				i++
			}
		case len(a) > 1 && a[0] == '-':
			desc, stop, skipNext := in.cluster(a)
			if desc != "" {
				if desc == "-i" && !stdinToo {
					continue
				}
				return desc, true
			}
			if stop {
				return "", false // python -m module: a module, not inline code
			}
			if skipNext {
				i++
			}
		default:
			return in.script(a, stdinToo)
		}
	}
	return stdinDesc(in.stdin && stdinToo)
}

// script judges the first operand, the script file.
func (in interpreter) script(s string, stdinToo bool) (string, bool) {
	if stdinToo && isStdinPath(s) {
		return "reading its program from " + s, true
	}
	return "", false
}

func stdinDesc(ok bool) (string, bool) {
	if !ok {
		return "", false
	}
	return "reading its program from standard input", true
}

// cluster scans one word of short options: desc names an inline-code
// option found ("-e"), stop is a module option, skipNext means the
// option's value is the next word.
func (in interpreter) cluster(a string) (desc string, stop, skipNext bool) {
	for k := 1; k < len(a); k++ {
		c := a[k]
		switch {
		case strings.IndexByte(in.inline, c) >= 0:
			return "-" + string(c), false, false
		case strings.IndexByte(in.module, c) >= 0:
			return "", true, false
		case strings.IndexByte(in.interactive, c) >= 0:
			return "-" + string(c), false, false
		case strings.IndexByte(in.attached, c) >= 0:
			return "", false, false
		case strings.IndexByte(in.digits, c) >= 0:
			for k+1 < len(a) && a[k+1] >= '0' && a[k+1] <= '9' {
				k++
			}
			continue
		case strings.IndexByte(in.argShort, c) >= 0:
			return "", false, k == len(a)-1
		}
		if !in.clusters {
			return "", false, false
		}
	}
	return "", false, false
}

// awkNames are the awk implementations.
var awkNames = map[string]bool{"awk": true, "gawk": true, "mawk": true, "nawk": true, "original-awk": true, "busybox-awk": true}

// awkRunsCommands reports whether an awk command line runs commands: its
// program text (the first operand, or -e/--source) calls system() or
// uses '|' (print | "cmd", "cmd" | getline), or its program file is
// standard input. The check is conservative: a '|' inside a regular
// expression (/a|b/) counts too; '||' does not.
func awkRunsCommands(args []string) (desc string, ok bool) {
	hasFile := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func(rest string) string {
			if rest != "" {
				return rest
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case a == "--":
			if !hasFile && i+1 < len(args) {
				return awkProgram(args[i+1])
			}
			return "", false
		case strings.HasPrefix(a, "--"):
			name, v, hasVal := strings.Cut(a, "=")
			switch name {
			case "--source":
				if !hasVal {
					v = val("")
				}
				if d, bad := awkProgram(v); bad {
					return d, true
				}
				hasFile = true
			case "--file", "--exec", "--include":
				if !hasVal {
					v = val("")
				}
				if isStdinPath(v) {
					return "reading its program from " + v, true
				}
				hasFile = true
			case "--field-separator", "--assign", "--load":
				if !hasVal {
					val("")
				}
			}
		case len(a) > 1 && a[0] == '-':
			c, rest := a[1], a[2:]
			switch c {
			case 'e':
				if d, bad := awkProgram(val(rest)); bad {
					return d, true
				}
				hasFile = true
			case 'f', 'E', 'i':
				if v := val(rest); isStdinPath(v) {
					return "reading its program from " + v, true
				}
				hasFile = true
			case 'F', 'v', 'l':
				val(rest)
			}
		default:
			if hasFile {
				return "", false
			}
			return awkProgram(a)
		}
	}
	return "", false
}

// awkProgram judges awk program text.
func awkProgram(p string) (string, bool) {
	if strings.Contains(p, "system") {
		return "whose program calls system()", true
	}
	if strings.Contains(strings.ReplaceAll(p, "||", ""), "|") {
		return "whose program pipes to or from a command", true
	}
	return "", false
}

// makeRunsInline reports whether a make command line reads a makefile
// from standard input (-f -, -f /dev/stdin) or evaluates makefile text
// given on the command line (--eval, -E). Options may come anywhere.
func makeRunsInline(args []string) (desc string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return "", false
		}
		if strings.HasPrefix(a, "--") {
			name, v, hasVal := strings.Cut(a, "=")
			switch name {
			case "--eval":
				return "--eval", true
			case "--file", "--makefile":
				if !hasVal && i+1 < len(args) {
					i++
					v = args[i]
				}
				if isStdinPath(v) {
					return "reading a makefile from " + v, true
				}
			case "--directory", "--include-dir", "--old-file", "--assume-old", "--what-if", "--new-file", "--assume-new":
				if !hasVal {
					i++
				}
			}
			continue
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		for k := 1; k < len(a); k++ {
			c := a[k]
			if c == 'E' {
				return "-E", true
			}
			if strings.IndexByte("CfIoW", c) < 0 {
				if strings.IndexByte("jlO", c) >= 0 {
					break // optional attached value (-j4)
				}
				continue
			}
			v := a[k+1:]
			if v == "" && i+1 < len(args) {
				i++
				v = args[i]
			}
			if c == 'f' && isStdinPath(v) {
				return "reading a makefile from " + v, true
			}
			break
		}
	}
	return "", false
}

// codeRunner reports whether prog, in command position, runs inline code
// or code from standard input given args (CM-10, CM-11): an interpreter,
// awk, make or git.
func codeRunner(prog string, args []string) (desc string, ok bool) {
	if in, found := lookupInterpreter(prog); found {
		if d, bad := in.inlineCode(args, true); bad {
			return prog + " " + d, true
		}
		return "", false
	}
	switch {
	case awkNames[prog]:
		if d, bad := awkRunsCommands(args); bad {
			return prog + " " + d, true
		}
	case prog == "make" || prog == "gmake":
		if d, bad := makeRunsInline(args); bad {
			return prog + " " + d, true
		}
	case prog == "git":
		if d, bad := gitRunsShell(args); bad {
			return "git " + d, true
		}
	case prog == "go":
		if d, bad := goExecShell(args); bad {
			return "go " + d, true
		}
	case prog == "npx" || prog == "npm" || prog == "pnpm":
		if d, bad := npmCall(prog, args); bad {
			return prog + " " + d, true
		}
	}
	return "", false
}

// goExecShell reports whether go's -exec or -toolexec option (go test
// -exec, go run -exec, go build -toolexec), whose value go splits into
// words and runs, runs a shell or inline code.
func goExecShell(args []string) (string, bool) {
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(strings.TrimPrefix(args[i], "-"), "=")
		if name != "-exec" && name != "exec" && name != "toolexec" && name != "-toolexec" {
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return "", false
			}
			i++
			val = args[i]
		}
		if _, desc, ok := detectShell(strings.Fields(val)); ok {
			return "-" + strings.TrimPrefix(name, "-") + " running " + desc, true
		}
	}
	return "", false
}

// npmCall reports whether npx, npm exec or pnpm exec/dlx is given a
// command string to run in a shell (-c, --call) among its own options,
// before the package's command.
func npmCall(prog string, args []string) (string, bool) {
	if prog != "npx" {
		if len(args) == 0 || (args[0] != "exec" && args[0] != "x" && args[0] != "dlx") {
			return "", false
		}
		args = args[1:]
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			return "", false
		}
		name, _, hasVal := strings.Cut(a, "=")
		switch {
		case name == "-c" || name == "--call":
			return name, true
		case (name == "-p" || name == "--package" || name == "-w" || name == "--workspace") && !hasVal:
			i++
		}
	}
	return "", false
}

// laterInline reports whether an interpreter met later in argv (find
// -exec python3 -c …, parallel perl -e …) is given inline code, or git a
// command-running option: only the explicit options count there, not a
// missing script, and a lone "r" (R) is taken for an operand.
func laterInline(prog string, args []string) (string, bool) {
	if in, found := lookupInterpreter(prog); found && prog != "r" {
		if d, bad := in.inlineCode(args, false); bad {
			return prog + " " + d, true
		}
	}
	if prog == "git" {
		if d, bad := gitRunsShell(args); bad {
			return "git " + d, true
		}
	}
	return "", false
}
