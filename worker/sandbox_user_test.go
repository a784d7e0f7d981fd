package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// SBX-11 (#12): on a root runner whose data directory every user can
// enter, the agent runs as the process sandbox's user: it reads its
// feedback file, writes the workspace, and its work becomes the patch.
func TestAgentAsSandboxUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testkit.Missing(t, "root (to switch users)")
	}
	t.Parallel()
	h := newHarness(t, bus.Config{})
	dataDir := filepath.Join(t.TempDir(), "data")
	for d := filepath.Dir(dataDir); strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.settings = func(s *jobrun.Settings) { s.DataDir = dataDir }
	deps := h.workerDeps(nil)
	p, ok := deps.Sandbox.(*sandbox.Process)
	if !ok {
		t.Fatalf("sandbox %s, want the process sandbox", deps.Sandbox.Name())
	}
	if off := sandbox.OffProtections(p.Protections()); off != "" {
		t.Fatalf("protections off: %s", off)
	}
	h.runWorker(deps, Config{})

	job := h.agentJob("fix", 2, strings.Join([]string{
		"@if-feedback FAIL: TestShout",
		"@write seen.txt", "feedback read", "@end",
		"@endif",
		"@write sub/new.go", "package sub", "@end",
	}, "\n"))
	job.Feedback = []byte(`{"v":1,"gates":[{"name":"test","stdout_tail":"--- FAIL: TestShout"}]}`)
	res := h.run(job)
	if res.Status != protocol.AgentSucceeded || res.Patch == nil {
		t.Fatalf("agent: %s exit %d, stderr %q", res.Status, res.ExitCode, res.Stderr)
	}
	if got := patchedFiles(h.patchBytes(res.Patch)); len(got) != 2 || got["seen.txt"] != "new" || got["sub/new.go"] != "new" {
		t.Errorf("patch touches %v, want seen.txt and sub/new.go", got)
	}
	h.Settled(protocol.KindAgent)
}
