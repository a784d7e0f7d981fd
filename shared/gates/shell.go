package gates

import (
	"path"
	"regexp"
	"strings"
)

// Shell detection (CM-03…CM-07).
//
// Commands are argv lists run without a shell. A gate whose command runs a
// shell on a command string (sh -c '…', cmd /c, powershell) is rejected at
// load unless it sets allow_shell: true, and so is a shell hidden behind a
// wrapper such as env, nice, timeout or sudo, whatever options the wrapper
// is given. A shell running a script file (bash scripts/check.sh) is not a
// shell command in this sense: the script is repository code, like a test.
//
// The scan does not stop at an option's value (the 10 of nice -n 10),
// which would let `nice -n 10 bash -c …` through: each wrapper's options
// that take a value are known, and, whatever the structured scan
// concludes, every later argv element that names a shell followed by -c is
// suspicious too.

// posixShells run their -c argument as a command string.
var posixShells = map[string]bool{
	"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "ash": true,
	"mksh": true, "pdksh": true, "yash": true, "posh": true, "fish": true,
	"csh": true, "tcsh": true, "rbash": true,
}

// winShells treat their arguments as a command line by default.
var winShells = map[string]bool{"cmd": true, "powershell": true, "pwsh": true}

// wrapper describes a program that runs another command given after its
// own options, so a shell may hide behind it (CM-04).
type wrapper struct {
	// argShort lists the short options that take a value (-n 10, -n10).
	argShort string
	// argLong lists the long options that take the next word as value when
	// not written --opt=value.
	argLong []string
	// operands is how many operands precede the command (timeout's duration).
	operands int
	// assigns: NAME=VALUE words may precede the command (env, sudo).
	assigns bool
	// shellShort and shellLong are options that make the wrapper itself
	// run a shell (sudo -s, su -c, flock -c).
	shellShort string
	shellLong  []string
	// always: the program always runs a shell (su, watch).
	always bool
	// optsAfterOperands: options may also follow the operands (flock).
	optsAfterOperands bool
}

var wrappers = map[string]wrapper{
	"env":     {argShort: "uCSP", argLong: []string{"--unset", "--chdir", "--split-string"}, assigns: true},
	"command": {},
	"exec":    {argShort: "a"},
	"xargs": {argShort: "adEILnPs", argLong: []string{
		"--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-chars", "--process-slot-var",
	}},
	"nice":    {argShort: "n", argLong: []string{"--adjustment"}},
	"nohup":   {},
	"timeout": {argShort: "sk", argLong: []string{"--signal", "--kill-after"}, operands: 1},
	"stdbuf":  {argShort: "ioe", argLong: []string{"--input", "--output", "--error"}},
	"ionice":  {argShort: "cnpPu", argLong: []string{"--class", "--classdata", "--pid", "--pgid", "--uid"}},
	"chrt": {argShort: "TPD", argLong: []string{"--sched-runtime", "--sched-period", "--sched-deadline"},
		operands: 1},
	"taskset": {operands: 1},
	"numactl": {argShort: "ipmNCP", argLong: []string{
		"--interleave", "--preferred", "--membind", "--cpunodebind", "--physcpubind", "--cpubind",
	}},
	"time":     {argShort: "fo", argLong: []string{"--format", "--output"}},
	"chronic":  {},
	"unbuffer": {},
	"sudo": {argShort: "CDghpRrtTUu", argLong: []string{
		"--close-from", "--chdir", "--group", "--host", "--prompt", "--chroot", "--role", "--type",
		"--command-timeout", "--other-user", "--user",
	}, assigns: true, shellShort: "si", shellLong: []string{"--shell", "--login"}},
	"doas":    {argShort: "aCu", shellShort: "s"},
	"su":      {always: true},
	"runuser": {argShort: "ugGcsw", argLong: []string{"--user", "--group", "--supp-group", "--command", "--shell", "--whitelist-environment"}},
	"setsid":  {},
	"flock": {argShort: "wE", argLong: []string{"--timeout", "--conflict-exit-code"},
		shellShort: "c", shellLong: []string{"--command"}, operands: 1, optsAfterOperands: true},
	"chroot":  {argLong: []string{"--userspec", "--groups"}, operands: 1},
	"busybox": {},
	"watch":   {always: true},
	"script":  {argShort: "cEeIOBTm", shellShort: "c", shellLong: []string{"--command"}},
}

// maxUnwrap bounds how many wrappers the scan looks through.
const maxUnwrap = 64

// progName normalizes a program name for comparison (CM-03): the basename
// after turning '\' into '/', lowercased, without ".exe".
func progName(s string) string {
	s = path.Base(strings.ReplaceAll(s, `\`, "/"))
	s = strings.ToLower(s)
	return strings.TrimSuffix(s, ".exe")
}

// ShellCommand reports whether argv runs a shell on a command string, and
// names the program that does: a POSIX shell with -c (sh, bash, zsh, dash,
// ksh, fish, csh…) or reading commands from standard input (no script
// operand, -s, -i), cmd, powershell or pwsh, or a wrapper that runs a
// shell itself (su, sudo -s, flock -c, watch); directly, or behind any
// chain of the wrappers env, command, exec, xargs, nice, nohup, timeout,
// stdbuf, ionice, chrt, taskset, numactl, time, chronic, unbuffer, sudo,
// doas, su, runuser, setsid, flock, chroot, busybox and script with their
// options and option values (CM-06). Inline code counts as a shell (CM-10:
// python -c, perl -e, node -e, an awk program calling system(), make
// --eval, a script or makefile read from /dev/stdin), and so does git
// running one (CM-11: -c alias.x=!…, rebase --exec). When in doubt it
// keeps scanning: any later argv element naming a shell followed by -c
// (or cmd /c, powershell -Command), an interpreter given an inline-code
// option, or git given a shell-running option counts too.
func ShellCommand(argv []string) (string, bool) {
	name, _, ok := detectShell(argv)
	return name, ok
}

// detectShell is ShellCommand, also describing the invocation for messages
// ("sh -c", "bash reading standard input", "sudo -s").
func detectShell(argv []string) (name, desc string, ok bool) {
	if name, desc, ok := shellInChain(argv); ok {
		return name, desc, true
	}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if strings.Contains(strings.ReplaceAll(a, `\`, "/"), "/") && !isAbs(a) {
			continue // a relative path (./cmd, pkg/sh) is an operand, not a program
		}
		name := progName(a)
		switch {
		case posixShells[name] && shellHasC(argv[i+1:]):
			return name, name + " -c", true
		case winShells[name] && winHasCommand(name, argv[i+1:]):
			return name, name, true
		}
		if desc, ok := laterInline(name, argv[i+1:]); ok {
			return name, desc, true
		}
	}
	return "", "", false
}

func isAbs(s string) bool {
	s = strings.ReplaceAll(s, `\`, "/")
	return strings.HasPrefix(s, "/") || (len(s) >= 3 && s[1] == ':' && s[2] == '/')
}

// shellInChain follows the wrapper chain from argv[0].
func shellInChain(argv []string) (name, desc string, ok bool) {
	for range maxUnwrap {
		if len(argv) == 0 {
			return "", "", false
		}
		prog := progName(argv[0])
		switch {
		case posixShells[prog]:
			c, si, script := shellOptions(argv[1:])
			switch {
			case c:
				return prog, prog + " -c", true
			case si || script == "":
				return prog, prog + " reading commands from standard input", true
			case isStdinPath(script):
				return prog, prog + " reading commands from " + script, true
			}
			return "", "", false
		case winShells[prog]:
			return prog, prog, true
		}
		if desc, ok := codeRunner(prog, argv[1:]); ok {
			return prog, desc, true
		}
		w, known := wrappers[prog]
		if !known {
			return "", "", false
		}
		if w.always {
			return prog, prog, true
		}
		if prog == "runuser" && !runuserHasUser(argv[1:]) {
			return prog, prog, true // su-compatible mode: runs the user's shell
		}
		rest, split, opt := w.skip(prog, argv[1:])
		if opt != "" {
			return prog, prog + " " + opt, true
		}
		if split != nil {
			// env -S splits its argument into words that come first.
			rest = append(split, rest...)
		}
		argv = rest
	}
	return "", "", false
}

// runuserHasUser reports whether runuser was given -u/--user, which makes
// it run the command directly rather than through a shell.
func runuserHasUser(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--user" || strings.HasPrefix(a, "--user=") || (strings.HasPrefix(a, "-u") && !strings.HasPrefix(a, "--")) {
			return true
		}
	}
	return false
}

// skip returns the words after the wrapper's options, assignments and
// operands; for env -S the split string's words; and the option that
// makes the wrapper run a shell itself, if any.
func (w wrapper) skip(prog string, args []string) (rest, split []string, shellOpt string) {
	i, split, shellOpt := w.options(prog, args, 0)
	if shellOpt != "" {
		return nil, nil, shellOpt
	}
	if w.assigns {
		for i < len(args) && isAssignment(args[i]) {
			i++
		}
	}
	i = min(i+w.operands, len(args))
	if w.optsAfterOperands {
		// flock FILE -c COMMAND: options may follow the operand.
		var more []string
		i, more, shellOpt = w.options(prog, args, i)
		if shellOpt != "" {
			return nil, nil, shellOpt
		}
		split = append(split, more...)
	}
	return args[i:], split, ""
}

// options skips the wrapper's options from args[i], returning the index
// of the first word after them.
func (w wrapper) options(prog string, args []string, i int) (next int, split []string, shellOpt string) {
	setSplit := func(s string) { split = strings.Fields(s) }
	for i < len(args) {
		a := args[i]
		switch {
		case a == "--":
			return i + 1, split, ""
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a, "=")
			if contains(w.shellLong, name) {
				return i, nil, name
			}
			if contains(w.argLong, name) && !hasVal && i+1 < len(args) {
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
				if strings.IndexByte(w.shellShort, c) >= 0 {
					return i, nil, "-" + string(c)
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
		case w.assigns && isAssignment(a):
			i++
		default:
			return i, split, ""
		}
	}
	return i, split, ""
}

// isAssignment reports whether an env/sudo argument sets a variable: it
// contains '=' and does not start with '=' or '-' (CM-05).
func isAssignment(s string) bool {
	return strings.Contains(s, "=") && !strings.HasPrefix(s, "=") && !strings.HasPrefix(s, "-")
}

// shellHasC reports whether a POSIX shell's options (before its first
// operand, the script) include -c (or fish's --command).
func shellHasC(args []string) bool {
	c, _, _ := shellOptions(args)
	return c
}

// shellOptions scans a POSIX shell's arguments up to its first operand:
// c reports -c (or fish's --command), si -s or -i, and script is the
// script operand following the options, "" if none ("-" is standard
// input, not a script). Options taking a value (-o, --rcfile …) skip it.
func shellOptions(args []string) (c, si bool, script string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-":
			return c, si, ""
		case a == "--":
			if i+1 < len(args) {
				return c, si, args[i+1]
			}
			return c, si, ""
		case a == "--command" || strings.HasPrefix(a, "--command="):
			c = true // fish
		case strings.HasPrefix(a, "--"):
			if a == "--rcfile" || a == "--init-file" || a == "--init-command" {
				i++
			}
		case len(a) > 1 && (a[0] == '-' || a[0] == '+'):
			for k := 1; k < len(a); k++ {
				switch a[k] {
				case 'c':
					c = c || a[0] == '-'
				case 's', 'i':
					si = si || a[0] == '-'
				case 'o', 'O':
					if k == len(a)-1 {
						i++
					}
				}
			}
		default:
			return c, si, a
		}
	}
	return c, si, ""
}

// winHasCommand reports whether cmd or powershell, met later in argv, is
// given a command to run: cmd /c or /k, powershell -Command (any prefix),
// -EncodedCommand.
func winHasCommand(name string, args []string) bool {
	for _, a := range args {
		l := strings.ToLower(a)
		if name == "cmd" {
			if l == "/c" || l == "/k" || l == "/r" {
				return true
			}
			continue
		}
		switch {
		case l == "-c", l == "-e", l == "-ec", l == "-cwa":
			return true
		case len(l) >= 4 && (strings.HasPrefix("-command", l) || strings.HasPrefix("-commandwithargs", l) ||
			strings.HasPrefix("-encodedcommand", l)):
			return true
		}
	}
	return false
}

// EnvDenied reports why an environment variable may not be set by a gate
// or task, or "" if it may. The check ignores case (EV-03): PATH, HOME,
// USER and PYTHONPATH are controlled by the runner, LD_* changes how
// programs are loaded, GIT_CONFIG_PARAMETERS, GIT_CONFIG_COUNT,
// GIT_CONFIG_KEY_*, GIT_CONFIG_VALUE_*, GIT_CONFIG, GIT_CONFIG_GLOBAL and
// GIT_CONFIG_SYSTEM inject git configuration, which can define `!`
// aliases that run a shell, GIT_EXTERNAL_DIFF, GIT_PAGER, GIT_EDITOR,
// GIT_SEQUENCE_EDITOR, GIT_SSH, GIT_SSH_COMMAND, GIT_ASKPASS,
// GIT_PROXY_COMMAND, GIT_EXEC_PATH and GIT_TEMPLATE_DIR name programs or
// hooks git runs (CM-11), and SUPERVISOR_* is reserved.
func EnvDenied(key string) string {
	k := strings.ToUpper(key)
	switch {
	case k == "PATH" || k == "HOME" || k == "USER" || k == "PYTHONPATH":
		return "it is controlled by the runner"
	case strings.HasPrefix(k, "LD_"):
		return "LD_* variables change how programs are loaded"
	case k == "GIT_CONFIG" || k == "GIT_CONFIG_PARAMETERS" || k == "GIT_CONFIG_COUNT" ||
		k == "GIT_CONFIG_GLOBAL" || k == "GIT_CONFIG_SYSTEM" ||
		strings.HasPrefix(k, "GIT_CONFIG_KEY_") || strings.HasPrefix(k, "GIT_CONFIG_VALUE_"):
		return "it injects git configuration, which can define aliases that run a shell"
	case k == "GIT_EXTERNAL_DIFF" || k == "GIT_PAGER" || k == "GIT_EDITOR" || k == "GIT_SEQUENCE_EDITOR" ||
		k == "GIT_SSH" || k == "GIT_SSH_COMMAND" || k == "GIT_ASKPASS" || k == "GIT_PROXY_COMMAND" ||
		k == "GIT_EXEC_PATH" || k == "GIT_TEMPLATE_DIR":
		return "it names a program or hooks git runs, through the shell for most"
	case strings.HasPrefix(k, "SUPERVISOR_"):
		return "SUPERVISOR_* variables are reserved for Supervisor"
	}
	return ""
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidEnvName reports whether s is a POSIX environment variable name (GC-07).
func ValidEnvName(s string) bool { return envNameRE.MatchString(s) }

// DeniedEnvViaWrapper returns the first denylisted variable the command
// sets through an env (or sudo) wrapper, e.g. [env, LD_PRELOAD=x.so, go,
// test] (CM-07). Like ShellCommand it does not stop at option values: it
// checks the assignments after every env or sudo element of argv,
// including env -S strings.
func DeniedEnvViaWrapper(argv []string) (string, bool) {
	for i, a := range argv {
		name := progName(a)
		if name != "env" && name != "sudo" {
			continue
		}
		w := wrappers[name]
		for _, kv := range wrapperAssignments(w, name, argv[i+1:]) {
			k, _, _ := strings.Cut(kv, "=")
			if EnvDenied(k) != "" {
				return k, true
			}
		}
	}
	return "", false
}

// wrapperAssignments lists the NAME=VALUE words an env or sudo invocation
// sets, including those inside env -S strings.
func wrapperAssignments(w wrapper, prog string, args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) && isAssignment(args[i+1]) && prog == "env" {
				continue
			}
			return out
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a, "=")
			if contains(w.argLong, name) && !hasVal && i+1 < len(args) {
				i++
				val = args[i]
			}
			if name == "--split-string" {
				out = append(out, splitAssignments(val)...)
			}
		case len(a) > 1 && a[0] == '-':
			for k := 1; k < len(a); k++ {
				c := a[k]
				if strings.IndexByte(w.argShort, c) < 0 {
					continue
				}
				val := a[k+1:]
				if val == "" && i+1 < len(args) {
					i++
					val = args[i]
				}
				if c == 'S' && prog == "env" {
					out = append(out, splitAssignments(val)...)
				}
				break
			}
		case isAssignment(a):
			out = append(out, a)
		default:
			return out
		}
	}
	return out
}

func splitAssignments(s string) []string {
	var out []string
	for _, f := range strings.Fields(s) {
		if !isAssignment(f) {
			break
		}
		out = append(out, f)
	}
	return out
}
