package gates

import "strings"

// Git commands that run a shell or another program (CM-11). git runs
// `!` aliases through /bin/sh, and many configuration keys name programs
// it runs (core.pager, core.sshCommand, diff.<driver>.textconv, …); some
// subcommands run commands given on their command line (rebase --exec,
// bisect run, submodule foreach). Each of these needs allow_shell.

// gitGlobalArg are git's options before the subcommand that take the next
// word as value when not written --opt=value.
var gitGlobalArg = []string{"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix",
	"--config-env", "--attr-source"}

// gitProgramNames are configuration variable names whose value is a
// program git runs (the part after the last '.', lowercased).
var gitProgramNames = map[string]bool{
	"pager": true, "editor": true, "askpass": true, "fsmonitor": true, "hookspath": true,
	"external": true, "textconv": true, "driver": true, "clean": true, "smudge": true,
	"process": true, "receivepack": true, "uploadpack": true, "difffilter": true,
	"gitproxy": true, "smtpserver": true, "browser": true,
}

// gitProgramSuffixes end configuration variable names whose value is a
// program (core.sshCommand, gpg.program, credential.helper,
// sendemail.toCmd, uploadpack.packObjectsHook).
var gitProgramSuffixes = []string{"command", "cmd", "program", "helper", "hook"}

// gitKeyRunsCommand reports whether setting key to value makes git run a
// program or a shell: a `!` alias (any alias when the value is unknown,
// as with --config-env), an include of another configuration file (which
// may define such aliases), a pager, editor, helper, driver, filter,
// hook or transport program, or enabling the ext:: transport.
func gitKeyRunsCommand(key, value string, known bool) bool {
	k := strings.ToLower(strings.TrimSpace(key))
	section, _, _ := strings.Cut(k, ".")
	name := k[strings.LastIndexByte(k, '.')+1:]
	switch {
	case section == "alias":
		return !known || strings.HasPrefix(strings.TrimSpace(value), "!")
	case section == "include" || section == "includeif":
		return name == "path"
	case section == "pager":
		return true
	case section == "protocol":
		return name == "allow"
	case name == "path":
		return section == "difftool" || section == "mergetool" || section == "browser" || section == "man"
	case gitProgramNames[name]:
		return true
	}
	for _, s := range gitProgramSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// gitRunsShell reports whether a git command line (after "git") runs a
// shell or a program of its configuration's or command line's choosing.
func gitRunsShell(args []string) (desc string, ok bool) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) == 0 || a[0] != '-' {
			break
		}
		name, val, hasVal := strings.Cut(a, "=")
		if !contains(gitGlobalArg, name) {
			continue
		}
		if name == "-c" || name == "-C" {
			hasVal = false // -c takes the next word whole: -c alias.x=!sh
		}
		if !hasVal {
			if i+1 >= len(args) {
				return "", false
			}
			i++
			val = args[i]
		}
		switch name {
		case "-c":
			k, v, _ := strings.Cut(val, "=")
			if gitKeyRunsCommand(k, v, true) {
				return "-c " + val, true
			}
		case "--config-env":
			k, _, _ := strings.Cut(val, "=")
			if gitKeyRunsCommand(k, "", false) {
				return "--config-env " + val, true
			}
		}
	}
	if i >= len(args) || args[i] == "--" {
		return "", false
	}
	sub, rest := args[i], args[i+1:]
	switch sub {
	case "config":
		return gitConfigRunsShell(rest)
	case "rebase":
		if o, found := gitOption(rest, "x", "--exec"); found {
			return "rebase " + o, true
		}
	case "bisect":
		if len(rest) > 0 && rest[0] == "run" {
			return "bisect run", true
		}
	case "submodule":
		for _, a := range rest {
			if a == "foreach" {
				return "submodule foreach", true
			}
		}
	case "filter-branch":
		return "filter-branch", true
	case "difftool":
		if o, found := gitOption(rest, "x", "--extcmd"); found {
			return "difftool " + o, true
		}
	case "grep":
		if o, found := gitOption(rest, "O", "--open-files-in-pager"); found {
			return "grep " + o, true
		}
	}
	short := ""
	if sub == "clone" {
		short = "u" // clone -u is --upload-pack; push -u is --set-upstream
	}
	if o, found := gitOption(rest, short, "--upload-pack", "--receive-pack", "--exec"); found &&
		(sub == "clone" || sub == "fetch" || sub == "pull" || sub == "push" || sub == "ls-remote" || sub == "archive") {
		return sub + " " + o, true
	}
	for _, a := range rest {
		if strings.HasPrefix(strings.ToLower(a), "ext::") {
			return sub + " with an ext:: URL", true
		}
	}
	return "", false
}

// gitOption finds a short option (as its own word or a word's first
// letter after '-') or one of the long options (also --opt=value).
func gitOption(args []string, short string, long ...string) (string, bool) {
	for _, a := range args {
		if a == "--" {
			return "", false
		}
		name, _, _ := strings.Cut(a, "=")
		if contains(long, name) {
			return name, true
		}
		if short != "" && len(a) >= 2 && a[0] == '-' && a[1] != '-' && strings.Contains(a[1:], short) {
			return "-" + short, true
		}
	}
	return "", false
}

// gitConfigRunsShell reports whether a git config command sets a key
// that runs a program (gitKeyRunsCommand) or opens an editor (--edit).
func gitConfigRunsShell(args []string) (string, bool) {
	var ops []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-e" || a == "--edit":
			return "config --edit", true
		case a == "-f" || a == "--file" || a == "--blob" || a == "--type" || a == "--default" ||
			a == "--comment" || a == "--value" || a == "--url":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			ops = append(ops, a)
		}
	}
	if len(ops) > 0 {
		switch ops[0] {
		case "edit":
			return "config edit", true
		case "set":
			ops = ops[1:]
		case "get", "list", "unset", "rename-section", "remove-section":
			return "", false
		}
	}
	// Legacy form: key value [value-pattern]; a key alone is a read.
	if len(ops) >= 2 && gitKeyRunsCommand(ops[0], ops[1], true) {
		return "config " + ops[0] + " " + ops[1], true
	}
	return "", false
}
