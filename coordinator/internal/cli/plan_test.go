package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestPlanCommand(t *testing.T) {
	configs := filepath.Join("..", "..", "..", "configs")
	empty := t.TempDir()
	feature := filepath.Join("..", "templates", "testdata", "healthz.md")
	golden, err := os.ReadFile(filepath.Join("..", "templates", "testdata", "mvp-healthz.golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.md")
	if err := os.WriteFile(bad, []byte("---\ngates: [go-build, no-such-gate]\n---\n# Bad\n\nx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badKey := filepath.Join(t.TempDir(), "badkey.md")
	if err := os.WriteFile(badKey, []byte("---\nnmae: x\n---\n# Bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      []string
		code      int
		stdout    string // exact, when set
		stderrHas string
		stdoutHas string
	}{
		{"expands", []string{"--template", "mvp", feature}, ExitOK, string(golden), "", ""},
		{"invalid workflow", []string{"--template", "standard", bad}, ExitInvalid, "", `(template standard):5:19: gates lists "no-such-gate", which no built-in, user or project gate defines`, "role: tester"},
		{"bad front matter", []string{"--template", "mvp", badKey}, ExitInvalid, "", `badkey.md:2:1: unknown field "nmae" in front matter`, ""},
		{"unknown template", []string{"--template", "waterfall", feature}, ExitUsage, "", `unknown template "waterfall"`, ""},
		{"no template", []string{feature}, ExitUsage, "", "--template is required", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"plan", "--builtin-gates", filepath.Join(configs, "gates"), "--user-gates", "",
				"--builtin-context", filepath.Join(configs, "context"), "--user-context", "",
				"--builtin-roles", filepath.Join(configs, "roles"), "--user-roles", empty,
				"--builtin-templates", filepath.Join(configs, "templates"), "--user-templates", empty}, tc.args...)
			code := Main(args, &out, &errOut)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out.String(), errOut.String())
			}
			if tc.stdout != "" && out.String() != tc.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), tc.stdout)
			}
			if !strings.Contains(errOut.String(), tc.stderrHas) || !strings.Contains(out.String(), tc.stdoutHas) {
				t.Errorf("stdout:\n%s\nstderr:\n%s\nwant stderr with %q, stdout with %q", out.String(), errOut.String(), tc.stderrHas, tc.stdoutHas)
			}
		})
	}
}

func TestRolesAndTemplatesCommands(t *testing.T) {
	configs := filepath.Join("..", "..", "..", "configs")
	user := t.TempDir()
	if err := os.WriteFile(filepath.Join(user, "implementer.yaml"), []byte("extends: implementer\nagent: {model: opus}\ngates: [go-test]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		args = append(args, "--builtin-gates", filepath.Join(configs, "gates"), "--user-gates", "",
			"--builtin-roles", filepath.Join(configs, "roles"), "--user-roles", user,
			"--builtin-templates", filepath.Join(configs, "templates"), "--user-templates", "")
		code := Main(args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, stderr := run("roles")
	if code != 0 || !regexp.MustCompile(`(?m)^implementer +user +claude-code`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^security_reviewer +built-in +claude-code +review +security_audit \(20000\)`).MatchString(out) {
		t.Errorf("roles: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = run("roles", "implementer")
	if code != 0 || !strings.Contains(out, "agent: claude-code, model opus") || !strings.Contains(out, "gates: go-test") ||
		!strings.Contains(out, filepath.Join(user, "implementer.yaml")+" <- ") {
		t.Errorf("roles implementer: exit %d\n%s%s", code, out, stderr)
	}
	code, out, _ = run("roles", "reviewer", "-o", "json")
	if code != 0 || !strings.Contains(out, `"output": "review"`) || !strings.Contains(out, `"gates": []`) {
		t.Errorf("roles reviewer -o json: exit %d\n%s", code, out)
	}
	if code, _, stderr = run("roles", "wizard"); code != ExitUsage || !strings.Contains(stderr, `unknown role "wizard"`) {
		t.Errorf("roles wizard: exit %d %s", code, stderr)
	}
	code, out, stderr = run("templates")
	if code != 0 || !regexp.MustCompile(`(?m)^security_critical +enterprise, _base +`).MatchString(out) {
		t.Errorf("templates: exit %d\n%s%s", code, out, stderr)
	}
}
