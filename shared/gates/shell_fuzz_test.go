package gates

import (
	"strings"
	"testing"
)

// FuzzShellCommand checks the shell detector on any argv (words split at
// NUL): it never panics, a detection always names a program and says
// how it runs code, and what is detected stays detected behind the
// wrappers nice, env and timeout (CM-04, CM-06, CM-10, CM-11), so a
// wrapper can never hide a shell the bare command would show.
func FuzzShellCommand(f *testing.F) {
	seeds := [][]string{
		{"sh", "-c", "x"},
		{"nice", "-n", "10", "bash", "-c", "x"},
		{"env", "-S", "bash -c x"},
		{"go", "test", "./..."},
		{"bash", "scripts/check.sh"},
		{"python3", "-c", "import os"},
		{"python3", "-m", "pytest"},
		{"perl", "-lne", "print"},
		{"ruby", "-r", "json", "-e", "x"},
		{"node", "--eval=x"},
		{"awk", "BEGIN{system(\"id\")}"},
		{"gawk", "-F:", "{print | \"sh\"}"},
		{"bash", "/dev/stdin"},
		{"make", "-f", "/dev/stdin"},
		{"make", "--eval", "x:;@id", "x"},
		{"git", "-c", "alias.x=!sh", "x"},
		{"git", "--config-env=alias.x=E", "x"},
		{"git", "config", "alias.x", "!id"},
		{"git", "rebase", "--exec", "id"},
		{"find", ".", "-exec", "perl", "-e", "x", ";"},
	}
	for _, s := range seeds {
		f.Add(strings.Join(s, "\x00"))
	}
	f.Fuzz(func(t *testing.T, joined string) {
		argv := strings.Split(joined, "\x00")
		if len(argv) > 64 {
			argv = argv[:64]
		}
		name, desc, ok := detectShell(argv)
		if ok != (name != "") || ok != (desc != "") {
			t.Fatalf("detectShell(%q) = %q, %q, %v", argv, name, desc, ok)
		}
		if n, ok2 := ShellCommand(argv); ok2 != ok || n != name {
			t.Fatalf("ShellCommand(%q) = %q, %v; detectShell said %q, %v", argv, n, ok2, name, ok)
		}
		if !ok {
			return
		}
		for _, prefix := range [][]string{
			{"nice", "-n", "10", "--"},
			{"env", "--"},
			{"timeout", "-s", "KILL", "30s"},
		} {
			if prefix[0] == "env" && isAssignment(argv[0]) {
				continue // env takes NAME=VALUE words as assignments, as env(1) does
			}
			wrapped := append(append([]string{}, prefix...), argv...)
			if _, _, found := detectShell(wrapped); !found {
				t.Fatalf("detectShell(%q) found %s, but not behind %q", argv, desc, prefix)
			}
		}
		_, _ = DeniedEnvViaWrapper(argv)
	})
}
