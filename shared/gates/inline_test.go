package gates

import "testing"

// CM-10, CM-11 (#12): interpreters given inline code or reading their
// program from standard input, awk programs running commands, make
// reading a makefile from standard input or --eval, and git running a
// shell through an alias, a configuration key or a subcommand are found
// like sh -c, directly, behind wrappers and later in argv; repository
// scripts, modules and ordinary git and make commands are not.
func TestShellCommandInlineCode(t *testing.T) {
	tests := []struct {
		argv []string
		want string // the description detectShell gives; "" = allowed
	}{
		// Interpreters' inline-code options, any spelling.
		{[]string{"python3", "-c", "import os; os.system('id')"}, "python3 -c"},
		{[]string{"/usr/bin/python3.12", "-Sc", "x"}, "python3.12 -c"},
		{[]string{"python", "-W", "error", "-c", "x"}, "python -c"},
		{[]string{"python3", "-cimport os"}, "python3 -c"},
		{[]string{"python3", "-i"}, "python3 -i"},
		{[]string{"python3"}, "python3 reading its program from standard input"},
		{[]string{"python3", "-"}, "python3 reading its program from standard input"},
		{[]string{"python3", "/dev/stdin"}, "python3 reading its program from /dev/stdin"},
		{[]string{"perl", "-e", "system('id')"}, "perl -e"},
		{[]string{"perl", "-E", "say 1"}, "perl -E"},
		{[]string{"perl", "-lne", "print"}, "perl -e"},
		{[]string{"perl", "-0777", "-ne", "x"}, "perl -e"},
		{[]string{"perl", "-Mstrict", "-we", "x"}, "perl -e"},
		{[]string{"ruby", "-e", "system 'id'"}, "ruby -e"},
		{[]string{"ruby", "-r", "json", "-ne", "x"}, "ruby -e"},
		{[]string{"node", "-e", "require('child_process')"}, "node -e"},
		{[]string{"node", "--eval=x"}, "node --eval"},
		{[]string{"nodejs", "-p", "1"}, "nodejs -p"},
		{[]string{"node", "--require", "x", "--print", "1"}, "node --print"},
		{[]string{"node"}, "node reading its program from standard input"},
		{[]string{"bun", "--eval", "x"}, "bun --eval"},
		{[]string{"deno", "eval", "x"}, "deno eval"},
		{[]string{"php", "-r", "system('id');"}, "php -r"},
		{[]string{"lua", "-e", "os.execute('id')"}, "lua -e"},
		{[]string{"Rscript", "-e", "system('id')"}, "rscript -e"},
		// Shells and make reading standard input or a descriptor.
		{[]string{"bash", "/dev/stdin"}, "bash reading commands from /dev/stdin"},
		{[]string{"sh", "/proc/self/fd/0"}, "sh reading commands from /proc/self/fd/0"},
		{[]string{"bash", "--", "//dev/fd/0"}, "bash reading commands from //dev/fd/0"},
		{[]string{"make", "-f", "/dev/stdin"}, "make reading a makefile from /dev/stdin"},
		{[]string{"make", "-sf-"}, "make reading a makefile from -"},
		{[]string{"make", "--file=/dev/fd/3", "all"}, "make reading a makefile from /dev/fd/3"},
		{[]string{"make", "--eval", "x:;@id", "x"}, "make --eval"},
		{[]string{"make", "-j4", "-E", "x:;@id"}, "make -E"},
		// awk programs calling system() or piping, or read from stdin.
		{[]string{"awk", "BEGIN{system(\"id\")}"}, "awk whose program calls system()"},
		{[]string{"gawk", "-F:", "-v", "x=1", "{print | \"sh\"}"}, "gawk whose program pipes to or from a command"},
		{[]string{"mawk", "BEGIN{\"id\" | getline x}"}, "mawk whose program pipes to or from a command"},
		{[]string{"gawk", "-e", "BEGIN{system(\"id\")}"}, "gawk whose program calls system()"},
		{[]string{"awk", "-f", "/dev/stdin"}, "awk reading its program from /dev/stdin"},
		{[]string{"busybox", "awk", "BEGIN{system(\"id\")}"}, "awk whose program calls system()"},
		// git: ! aliases and program-running keys in -c and --config-env,
		// git config writing them, and subcommands running commands.
		{[]string{"git", "-c", "alias.x=!sh -c id", "x"}, "git -c alias.x=!sh -c id"},
		{[]string{"git", "-c", "Alias.X= !id", "x"}, "git -c Alias.X= !id"},
		{[]string{"git", "-C", "/tmp", "-c", "core.pager=id", "log"}, "git -c core.pager=id"},
		{[]string{"git", "-c", "core.sshCommand=id", "fetch"}, "git -c core.sshCommand=id"},
		{[]string{"git", "-c", "diff.x.textconv=id", "diff"}, "git -c diff.x.textconv=id"},
		{[]string{"git", "-c", "include.path=evil.cfg", "x"}, "git -c include.path=evil.cfg"},
		{[]string{"git", "-c", "protocol.ext.allow=always", "fetch"}, "git -c protocol.ext.allow=always"},
		{[]string{"git", "--config-env=alias.x=EVIL", "x"}, "git --config-env alias.x=EVIL"},
		{[]string{"git", "--config-env", "core.editor=E", "commit"}, "git --config-env core.editor=E"},
		{[]string{"git", "config", "alias.x", "!id"}, "git config alias.x !id"},
		{[]string{"git", "config", "--global", "--add", "credential.helper", "!f"}, "git config credential.helper !f"},
		{[]string{"git", "config", "set", "core.hooksPath", "h"}, "git config core.hooksPath h"},
		{[]string{"git", "config", "--edit"}, "git config --edit"},
		{[]string{"git", "rebase", "--exec", "id", "main"}, "git rebase --exec"},
		{[]string{"git", "rebase", "-x", "id", "main"}, "git rebase -x"},
		{[]string{"git", "bisect", "run", "make"}, "git bisect run"},
		{[]string{"git", "submodule", "--quiet", "foreach", "id"}, "git submodule foreach"},
		{[]string{"git", "filter-branch", "--tree-filter", "id"}, "git filter-branch"},
		{[]string{"git", "fetch", "--upload-pack=id", "."}, "git fetch --upload-pack"},
		{[]string{"git", "clone", "-u", "id", ".", "x"}, "git clone -u"},
		{[]string{"git", "ls-remote", "ext::sh -c id"}, "git ls-remote with an ext:: URL"},
		// go's -exec and -toolexec values, npx and npm exec -c.
		{[]string{"go", "test", "-exec", "sh -c id", "./..."}, "go -exec running sh -c"},
		{[]string{"go", "build", "-toolexec=python3 -c x", "."}, "go -toolexec running python3 -c"},
		{[]string{"npx", "-c", "id"}, "npx -c"},
		{[]string{"npm", "exec", "--call=id"}, "npm --call"},
		// Behind wrappers and later in argv.
		{[]string{"nice", "-n", "10", "python3", "-c", "x"}, "python3 -c"},
		{[]string{"env", "A=1", "timeout", "5s", "git", "-c", "alias.x=!id", "x"}, "git -c alias.x=!id"},
		{[]string{"find", ".", "-exec", "perl", "-e", "x", ";"}, "perl -e"},
		{[]string{"xargs", "-n1", "node", "-e", "x"}, "node -e"},
		{[]string{"parallel", "git", "-c", "alias.x=!id", "x"}, "git -c alias.x=!id"},

		// Allowed: scripts and modules from the repository, ordinary use.
		{[]string{"python3", "-m", "pytest", "-q"}, ""},
		{[]string{"python3", "-W", "error", "scripts/check.py", "-c"}, ""},
		{[]string{"python3", "-mpytest", "-c", "x"}, ""},
		{[]string{"perl", "-Ilib", "t/run.pl", "-e"}, ""},
		{[]string{"ruby", "-Ilib", "test/all.rb"}, ""},
		{[]string{"node", "--require", "ts-node/register", "test.js", "-e"}, ""},
		{[]string{"bun", "test"}, ""},
		{[]string{"deno", "test"}, ""},
		{[]string{"Rscript", "tests/run.R"}, ""},
		{[]string{"bash", "scripts/check.sh"}, ""},
		{[]string{"awk", "-F", ",", "{s += $2} END {print s}", "data.csv"}, ""},
		{[]string{"awk", "$1 == 1 || $2 == 2", "f"}, ""},
		{[]string{"awk", "-f", "scripts/sum.awk", "f"}, ""},
		{[]string{"make", "-j4", "check"}, ""},
		{[]string{"make", "-f", "build/Makefile", "-C", "sub", "test"}, ""},
		{[]string{"git", "-c", "core.quotepath=off", "diff", "--check"}, ""},
		{[]string{"git", "-c", "alias.st=status", "st"}, ""},
		{[]string{"git", "config", "alias.x"}, ""}, // a read
		{[]string{"git", "config", "user.name", "CI"}, ""},
		{[]string{"git", "push", "-u", "origin", "main"}, ""},
		{[]string{"git", "rebase", "-Xours", "main"}, ""},
		{[]string{"git", "log", "--format=%s|%h"}, ""},
		{[]string{"go", "test", "-run", "TestPython", "./..."}, ""},
		{[]string{"go", "test", "-exec", "scripts/run-in-qemu", "./..."}, ""},
		{[]string{"npx", "eslint", "-c", "eslint.config.js"}, ""},
		{[]string{"npm", "test", "--", "-c"}, ""},
		{[]string{"grep", "-R", "-e", "x", "."}, ""},
	}
	for _, tc := range tests {
		_, desc, ok := detectShell(tc.argv)
		if ok != (tc.want != "") || desc != tc.want {
			t.Errorf("detectShell(%q) = %q, %v; want %q", tc.argv, desc, ok, tc.want)
		}
	}
}

// CM-10 in a gate definition: inline code is rejected with the shell
// message and accepted with allow_shell.
func TestGateInlineCode(t *testing.T) {
	src := `gates:
  a: {command: [python3, -c, "import os"]}
  b: {command: [git, -c, "alias.x=!sh", x]}
  ok: {command: [python3, -c, "import os"], allow_shell: true}
  mod: {command: [python3, -m, pytest]}
`
	_, err := parseYAML(t, src)
	checkProblems(t, "g.yaml", src, err, []want{
		`2:16: gate "a" command runs a shell (python3 -c); commands are argv lists run without a shell`,
		`3:16: gate "b" command runs a shell (git -c alias.x=!sh)`,
	})
}
