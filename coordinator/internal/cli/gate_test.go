package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// These tests run the root command, as the binary does, against an
// in-process coordinator on embedded NATS (fleet.Start without runners).

type cliResult struct {
	code           int
	stdout, stderr string
}

// gateStack starts a coordinator whose own gate sources are a built-in
// "test" gate, and returns a function running the CLI against it.
func gateStack(t *testing.T) func(args ...string) cliResult {
	t.Helper()
	test := gates.New("test", "go", "test", "./...")
	test.Source = gates.Source{Origin: gates.OriginBuiltin, File: "configs/gates/go.yaml", Line: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := fleet.Start(ctx, fleet.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NoRunners: true,
		Gates: gates.NewSet(test), Tick: 200 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	empty := t.TempDir()
	return func(args ...string) cliResult {
		t.Helper()
		var out, errOut bytes.Buffer
		full := append([]string{"--nats=" + st.URL(), "--builtin-gates=" + empty, "--user-gates="}, args...)
		code := Main(full, &out, &errOut)
		return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
	}
}

func wantCode(t *testing.T, r cliResult, code int, contains ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	all := r.stdout + r.stderr
	for _, c := range contains {
		if !strings.Contains(all, c) {
			t.Errorf("output lacks %q\nstdout:\n%s\nstderr:\n%s", c, r.stdout, r.stderr)
		}
	}
}

func decodeJSON(t *testing.T, r cliResult, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r.stdout)
	}
}

// gate add, list, update and remove round trip through the coordinator's
// registry, and argv mistakes are explained before anything is sent.
func TestGateCommandsRoundTrip(t *testing.T) {
	t.Parallel()
	run := gateStack(t)

	r := run("gate", "list")
	wantCode(t, r, 0, "NAME", "SOURCE", "COMMAND", "TIMEOUT", "SEVERITY", "DEPENDS_ON", "test", "builtin", "go test ./...", "5m")

	// A string command is refused with the argv forms to use.
	r = run("gate", "add", "--name", "typecheck", "--command", "npm run typecheck")
	wantCode(t, r, ExitUsage, "argv list run without a shell", "--command npm --command run --command typecheck",
		"-- npm run typecheck")

	r = run("gate", "add", "--name", "vet", "--", "go", "vet", "./...")
	wantCode(t, r, 0, "gate vet added in the registry (revision", "new workflows can use it by name", "registry", "go vet ./...")

	r = run("gate", "add", "--name", "typecheck", "--command", "npm", "--command", "run", "--command", "typecheck",
		"--timeout", "2m", "--max-retries", "4", "--env", "CI=1", "--severity", "warning", "--depends-on", "vet",
		"--cache=false", "--allowed-writes", "dist/**", "-o", "json")
	wantCode(t, r, 0)
	var added api.GateChangeResponse
	decodeJSON(t, r, &added)
	d := added.Gate.Definition
	if added.Action != api.GateAdded || strings.Join(d.Command, " ") != "npm run typecheck" || d.TimeoutSeconds != 120 ||
		d.Retries() != 4 || d.Env["CI"] != "1" || d.Severity != "warning" || strings.Join(d.DependsOn, ",") != "vet" ||
		d.UsesCache() || strings.Join(d.AllowedWrites, ",") != "dist/**" {
		t.Fatalf("added = %+v", added)
	}

	r = run("gate", "add", "--name", "vet", "--", "go", "vet")
	wantCode(t, r, ExitFault, "already exists", "--replace")
	r = run("gate", "add", "--name", "sh", "--", "sh", "-c", "go vet ./...")
	wantCode(t, r, ExitInvalid, "gate add:2:", "runs a shell")
	r = run("gate", "remove", "test")
	wantCode(t, r, ExitFault, "built-in gate", "only gates added with `gate add` can be removed")

	// --timeout is the gate's here; only the flags given change.
	r = run("gate", "update", "vet", "--timeout", "600", "--max-retries", "5", "-o", "json")
	wantCode(t, r, 0)
	var updated api.GateChangeResponse
	decodeJSON(t, r, &updated)
	if d := updated.Gate.Definition; updated.Action != api.GateUpdated || d.TimeoutSeconds != 600 || d.Retries() != 5 ||
		strings.Join(d.Command, " ") != "go vet ./..." {
		t.Fatalf("updated = %+v", updated)
	}
	r = run("gate", "update", "vet", "--timeout", "2h")
	wantCode(t, r, ExitInvalid, "gate update:", "timeout 2h is out of range")
	r = run("gate", "update", "vet")
	wantCode(t, r, ExitUsage, "nothing to change")

	// A definition file, validated with its own name in problems.
	dir := t.TempDir()
	good := filepath.Join(dir, "lint.yaml")
	if err := os.WriteFile(good, []byte("name: lint\ncommand: [golangci-lint, run]\ntimeout: 10m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\ncommand: golangci-lint run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, run("gate", "add", "--file", good), 0, "gate lint added")
	wantCode(t, run("gate", "add", "--file", bad), ExitInvalid, bad+":2:10:", "[golangci-lint, run]")
	wantCode(t, run("gate", "add", "--file", good, "--timeout", "1m"), ExitUsage, "--file defines the whole gate")

	r = run("gate", "list", "-o", "json")
	wantCode(t, r, 0)
	var list api.GateListResponse
	decodeJSON(t, r, &list)
	got := map[string]api.GateInfo{}
	for _, g := range list.Gates {
		got[g.Name] = g
	}
	if len(list.Gates) != 4 || got["vet"].Source != api.SourceRegistry || got["vet"].Definition.TimeoutSeconds != 600 ||
		got["test"].Source != api.SourceBuiltin || got["lint"].Definition.TimeoutSeconds != 600 {
		t.Fatalf("list = %+v", list.Gates)
	}

	wantCode(t, run("gate", "remove", "vet"), ExitFault, "needed by typecheck")
	wantCode(t, run("gate", "remove", "typecheck"), 0, "gate typecheck removed from the registry")
	wantCode(t, run("gate", "remove", "vet"), 0, "gate vet removed from the registry")
	wantCode(t, run("gate", "remove", "vet"), ExitFault, `no gate "vet" in the registry`)
	r = run("gate", "list")
	wantCode(t, r, 0, "lint", "test")
	if strings.Contains(r.stdout, "vet") {
		t.Errorf("vet still listed:\n%s", r.stdout)
	}
}

// A workflow submitted with the CLI may name a registry gate (the local
// validation asks the coordinator for them); --task changes a running
// workflow's node, and list --task shows its effective gates.
func TestGateCommandsTask(t *testing.T) {
	t.Parallel()
	run := gateStack(t)
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "base\n"})

	wantCode(t, run("gate", "add", "--name", "vet", "--", "go", "vet", "./..."), 0)
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	if err := os.WriteFile(wf, []byte("name: t\ndefaults:\n  agent: {command: [fake-agent]}\n  allow_empty: true\ntasks:\n  - id: a\n    prompt: a\n    gates: [vet]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// plan, like submit, validates a template's workflow against them too.
	feature := filepath.Join(t.TempDir(), "feature.md")
	if err := os.WriteFile(feature, []byte("---\ngates: [vet]\n---\n# Vet it\n\nKeep go vet happy.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	configs, empty := filepath.Join("..", "..", "..", "configs"), t.TempDir()
	wantCode(t, run("plan", "--template", "mvp", feature, "--builtin-gates", empty, "--user-gates", "",
		"--builtin-context", filepath.Join(configs, "context"), "--user-context", "",
		"--builtin-roles", filepath.Join(configs, "roles"), "--user-roles", empty,
		"--builtin-templates", filepath.Join(configs, "templates"), "--user-templates", empty), 0, "gates: [vet]")
	r := run("submit", wf, "--repo", repo)
	wantCode(t, r, 0)
	id := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(id, "wf-") {
		t.Fatalf("submit printed %q", r.stdout)
	}
	task := id + "/a"

	r = run("gate", "list", "--task", task)
	// A required error gate's failure is retried with feedback (RETRY-09).
	wantCode(t, r, 0, "node "+task, "ON_FAIL", "REQUIRED", "STATUS", "vet", "retry_with_feedback", "yes")
	r = run("gate", "add", "--task", task, "--name", "extra", "--optional", "--on-fail", "warn", "--", "make", "check")
	wantCode(t, r, 0, "gate extra added on node "+task, "runs it once its agent succeeds")
	wantCode(t, run("gate", "add", "--task", task, "--name", "test"), 0, "gate test added on node "+task)
	r = run("gate", "list", "--task", task, "-o", "json")
	wantCode(t, r, 0)
	var list api.GateListResponse
	decodeJSON(t, r, &list)
	var names []string
	for _, g := range list.Gates {
		names = append(names, g.Name)
		if g.Name == "extra" && (g.Required == nil || *g.Required || g.OnFail != "warn" || g.Source != api.SourceTask) {
			t.Errorf("extra = %+v", g)
		}
	}
	if strings.Join(names, ",") != "extra,test,vet" {
		t.Errorf("node gates = %v", names)
	}
	r = run("gate", "update", "extra", "--task", task, "--timeout", "90", "-o", "json")
	wantCode(t, r, 0)
	var upd api.GateChangeResponse
	decodeJSON(t, r, &upd)
	if upd.Gate.Definition.TimeoutSeconds != 90 || upd.Gate.OnFail != "warn" {
		t.Errorf("node update = %+v", upd)
	}
	wantCode(t, run("gate", "remove", "extra", "--task", task), 0, "gate extra removed from node "+task)
	wantCode(t, run("gate", "remove", "extra", "--task", task), ExitFault, `has no gate "extra"`)
	wantCode(t, run("gate", "list", "--task", "nonsense"), ExitUsage, "WORKFLOW/NODE")
	wantCode(t, run("gate", "add", "--name", "x", "--optional", "--", "true"), ExitUsage, "--task")

	// Cancelled: no more changes.
	wantCode(t, run("cancel", id), 0)
	wantCode(t, run("gate", "add", "--task", task, "--name", "late", "--", "true"), ExitFault, "cancelled")
}
