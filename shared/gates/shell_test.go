package gates

import (
	"strings"
	"testing"
)

// CM-03…CM-06: shells are found directly and behind wrappers, whatever
// options and option values the wrappers get (nice -n 10 bash -c … too).
func TestShellCommand(t *testing.T) {
	tests := []struct {
		argv  []string
		shell string // "" = not a shell command
	}{
		// Direct shells (CM-03), case and .exe ignored.
		{[]string{"sh", "-c", "x"}, "sh"},
		{[]string{"/usr/bin/bash", "-lc", "x"}, "bash"},
		{[]string{"bash", "--norc", "-o", "pipefail", "-c", "x"}, "bash"},
		{[]string{"fish", "--command=x"}, "fish"},
		{[]string{`C:\Windows\System32\CMD.EXE`, "/c", "dir"}, "cmd"},
		{[]string{"powershell", "-Command", "Get-Process"}, "powershell"},
		{[]string{"pwsh", "script.ps1"}, "pwsh"},
		{[]string{"BASH", "-c", "x"}, "bash"},
		{[]string{"bash"}, "bash"},        // reads commands from standard input
		{[]string{"sh", "-s", "a"}, "sh"}, // ditto
		{[]string{"zsh", "-i"}, "zsh"},

		// Wrapper bypasses (CM-04), with options and their values.
		{[]string{"nice", "-n", "10", "bash", "-c", "x"}, "bash"},
		{[]string{"nice", "-n10", "sh", "-c", "x"}, "sh"},
		{[]string{"nice", "-10", "sh", "-c", "x"}, "sh"},
		{[]string{"nice", "--adjustment", "5", "sh", "-c", "x"}, "sh"},
		{[]string{"timeout", "-s", "KILL", "30s", "sh", "-c", "x"}, "sh"},
		{[]string{"timeout", "--kill-after=5s", "-s", "TERM", "10m", "sh", "-c", "x"}, "sh"},
		{[]string{"timeout", "30s", "bash", "-c", "x"}, "bash"},
		{[]string{"env", "-i", "FOO=1", "sh", "-c", "x"}, "sh"},
		{[]string{"env", "-u", "X", "--chdir", "/", "A=1", "sh", "-c", "x"}, "sh"},
		{[]string{"env", "-S", "bash -c x"}, "bash"},
		{[]string{"env", "--split-string=dash -c x"}, "dash"},
		{[]string{"xargs", "-0", "sh", "-c", "x"}, "sh"},
		{[]string{"xargs", "-n1", "-P", "4", "sh", "-c", "x"}, "sh"},
		{[]string{"xargs", "-n1", "-P", "4", "-I", "{}", "ksh", "-c", "x"}, "ksh"},
		{[]string{"sudo", "-u", "x", "bash"}, "bash"},
		{[]string{"sudo", "-u", "x", "-g", "y", "PATHX=1", "bash", "-c", "x"}, "bash"},
		{[]string{"sudo", "-s", "make"}, "sudo"},
		{[]string{"doas", "-u", "x", "sh", "-c", "x"}, "sh"},
		{[]string{"su", "-", "x", "-c", "make"}, "su"},
		{[]string{"runuser", "-l", "x", "-c", "make"}, "runuser"},
		{[]string{"runuser", "-u", "x", "--", "sh", "-c", "x"}, "sh"},
		{[]string{"stdbuf", "-oL", "-e", "0", "sh", "-c", "x"}, "sh"},
		{[]string{"nohup", "--", "zsh", "-c", "x"}, "zsh"},
		{[]string{"ionice", "-c", "2", "-n", "7", "sh", "-c", "x"}, "sh"},
		{[]string{"chrt", "-f", "10", "sh", "-c", "x"}, "sh"},
		{[]string{"taskset", "-c", "0-3", "sh", "-c", "x"}, "sh"},
		{[]string{"taskset", "0x3", "bash", "-c", "x"}, "bash"},
		{[]string{"numactl", "--interleave", "all", "-C", "0", "sh", "-c", "x"}, "sh"},
		{[]string{"time", "-f", "%e", "-o", "/tmp/t", "sh", "-c", "x"}, "sh"},
		{[]string{"chronic", "-e", "bash", "-c", "x"}, "bash"},
		{[]string{"unbuffer", "-p", "sh", "-c", "x"}, "sh"},
		{[]string{"command", "-p", "exec", "-a", "name", "sh", "-c", "x"}, "sh"},
		{[]string{"flock", "/tmp/l", "-c", "make"}, "flock"},
		{[]string{"nice", "-n", "10", "timeout", "-s", "KILL", "5m", "env", "-i", "A=1", "stdbuf", "-oL", "sh", "-c", "x"}, "sh"},
		{[]string{"watch", "make"}, "watch"},
		{[]string{"busybox", "sh", "-c", "x"}, "sh"},
		// When in doubt, keep scanning: an unknown option's value must not
		// end the scan; a later shell with -c is suspicious.
		{[]string{"timeout", "--weird", "X", "10s", "sh", "-c", "x"}, "sh"},
		{[]string{"nice", "--frob", "7", "/bin/bash", "-c", "x"}, "bash"},
		{[]string{"find", ".", "-exec", "sh", "-c", "x", ";"}, "sh"},
		{[]string{"parallel", "-j4", "--", "cmd", "/c", "x"}, "cmd"},

		// Not shell commands.
		{[]string{"sh", "script.sh"}, ""},
		{[]string{"sh", "script.sh", "-c"}, ""},
		{[]string{"bash", "--", "-c"}, ""},
		{[]string{"bash", "scripts/check.sh", "-c"}, ""},
		{[]string{"go", "test", "-c"}, ""},
		{[]string{"timeout", "10m", "go", "test"}, ""},
		{[]string{"env", "GOOS=linux", "go", "test", "-c"}, ""},
		{[]string{"nice", "-n", "10", "make", "check"}, ""},
		{[]string{"go", "build", "./cmd", "/c"}, ""}, // ./cmd is a path, not cmd.exe
		{[]string{"go", "test", "./sh", "-c"}, ""},   // ditto
		{[]string{"apt-get", "install", "bash"}, ""}, // a later shell needs -c
		{[]string{"env"}, ""},
		{nil, ""},
	}
	for _, tc := range tests {
		shell, ok := ShellCommand(tc.argv)
		if ok != (tc.shell != "") || (ok && shell != tc.shell) {
			t.Errorf("CM-06 ShellCommand(%q) = %q, %v; want %q", tc.argv, shell, ok, tc.shell)
		}
	}
}

// CM-07: a denylisted variable set through env (or sudo) is found anywhere
// along the command, also behind options with values and inside env -S.
func TestDeniedEnvViaWrapper(t *testing.T) {
	tests := []struct {
		argv []string
		key  string
	}{
		{[]string{"env", "LD_PRELOAD=x.so", "go", "test"}, "LD_PRELOAD"},
		{[]string{"env", "-i", "PATH=/evil", "go", "test"}, "PATH"},
		{[]string{"env", "-u", "HOME", "-C", "/", "home=/x", "go"}, "home"},
		{[]string{"nice", "-n", "10", "env", "LD_LIBRARY_PATH=/x", "go"}, "LD_LIBRARY_PATH"},
		{[]string{"timeout", "-s", "KILL", "30s", "env", "SUPERVISOR_TOKEN=t", "go"}, "SUPERVISOR_TOKEN"},
		{[]string{"env", "-S", "PYTHONPATH=. pytest"}, "PYTHONPATH"},
		{[]string{"env", "--split-string", "A=1 USER=root make"}, "USER"},
		{[]string{"sudo", "-u", "x", "LD_PRELOAD=y", "make"}, "LD_PRELOAD"},
		{[]string{"/usr/bin/env", "--", "PATH=/x", "go"}, "PATH"},
		{[]string{"env", "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=alias.x", "git", "x"}, "GIT_CONFIG_COUNT"},
		{[]string{"env", "git_config_parameters='alias.x=!id'", "git", "x"}, "git_config_parameters"},
		{[]string{"env", "GIT_CONFIG_VALUE_0=!id", "git", "x"}, "GIT_CONFIG_VALUE_0"},
		{[]string{"env", "GIT_EXTERNAL_DIFF=./x.sh", "git", "diff"}, "GIT_EXTERNAL_DIFF"},
		{[]string{"env", "GIT_SSH_COMMAND=sh -c id", "git", "fetch"}, "GIT_SSH_COMMAND"},
		{[]string{"env", "GIT_AUTHOR_NAME=CI", "git", "commit"}, ""},
		{[]string{"env", "GOOS=linux", "CGO_ENABLED=0", "go", "build"}, ""},
		{[]string{"go", "run", "./x", "PATH=/x"}, ""},
		{[]string{"env", "-i", "go", "PATH=/x"}, ""}, // after the command: arguments
	}
	for _, tc := range tests {
		key, ok := DeniedEnvViaWrapper(tc.argv)
		if ok != (tc.key != "") || key != tc.key {
			t.Errorf("CM-07 DeniedEnvViaWrapper(%q) = %q, %v; want %q", tc.argv, key, ok, tc.key)
		}
	}
}

// CM-06, CM-07, CM-08 in gate definitions: shells need allow_shell; a
// denylisted variable through env is rejected even with allow_shell.
func TestGateCommandSafety(t *testing.T) {
	src := `gates:
  a: {command: [sh, -c, "go test ./..."]}
  b: {command: [nice, -n, "10", bash, -c, x]}
  c: {command: [sudo, -u, x, bash]}
  d: {command: [env, -i, FOO=1, sh, -c, x]}
  ok: {command: [bash, -c, "go test ./... | tee log"], allow_shell: true}
  e: {command: [env, LD_PRELOAD=x.so, sh, -c, x], allow_shell: true}
  f: {command: [timeout, -s, KILL, 30s, env, -S, "PATH=/x go", test]}
  script: {command: [bash, scripts/check.sh]}
`
	_, err := parseYAML(t, src)
	checkProblems(t, "g.yaml", src, err, []want{
		`2:16: gate "a" command runs a shell (sh -c); commands are argv lists run without a shell, so give the program and its arguments directly, e.g. [go, test, ./...], or set allow_shell: true`,
		`3:16: gate "b" command runs a shell (bash -c)`,
		`4:16: gate "c" command runs a shell (bash reading commands from standard input)`,
		`5:16: gate "d" command runs a shell (sh -c)`,
		`7:16: gate "e" command sets LD_PRELOAD through an env wrapper; it may not be set: LD_* variables`,
		`8:16: gate "f" command sets PATH through an env wrapper`,
	})
	if !strings.Contains(err.Error(), "allow_shell: true if the gate really needs a shell") {
		t.Errorf("message does not say how to allow a shell: %v", err)
	}
}
