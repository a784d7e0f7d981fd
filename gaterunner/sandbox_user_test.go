package gaterunner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// SBX-11, SBX-13 (#12): on a root runner whose data directory every user
// can enter, process-sandboxed gates run as the sandbox user. A hostile
// gate cannot break the runner's mirror (git config, a hook) nor read the
// runner's environment, and the next gate on that runner still runs git
// and passes.
func TestGateSandboxUserProtectsMirror(t *testing.T) {
	if os.Geteuid() != 0 {
		testkit.Missing(t, "root (to switch users)")
	}
	t.Parallel()
	h := newHarness(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	for d := filepath.Dir(dataDir); strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.startRunnerOpts(Config{}, runnerOpts{settings: func(s *jobrun.Settings) { s.DataDir = dataDir }})

	hostile := h.gateJob("hostile", 1, "sh", "-c", `id -u
git config core.repositoryformatversion 99 && echo CONFIG-WRITTEN
common=$(git rev-parse --git-common-dir) && echo "common $common"
echo 'exit 1' > "$common/hooks/post-checkout" && echo HOOK-WRITTEN
tr '\0' '\n' < /proc/$PPID/environ | grep RUNNER_TOKEN
exit 0`)
	hostile.Patches = []protocol.PatchRef{h.patch}
	g := h.run(hostile)
	if g.Status != protocol.GatePassed {
		t.Fatalf("hostile gate: status %s, output %q", g.Status, g.Output)
	}
	if !strings.HasPrefix(g.Stdout, "65534\n") || !strings.Contains(g.Stdout, "common /") {
		t.Errorf("hostile gate did not run git as 65534: stdout %q stderr %q", g.Stdout, g.Stderr)
	}
	for _, leak := range []string{"CONFIG-WRITTEN", "HOOK-WRITTEN", "RUNNER_TOKEN", runnerSecret, "[REDACTED]"} {
		if strings.Contains(g.Stdout, leak) {
			t.Errorf("hostile gate: stdout has %q:\n%s", leak, g.Stdout)
		}
	}
	if !strings.Contains(g.Stderr, "Permission denied") {
		t.Errorf("hostile gate: stderr %q, want permission errors", g.Stderr)
	}

	next := h.gateJob("next", 1, "sh", "-c", `git status --porcelain && test -f newfile`)
	next.Patches = []protocol.PatchRef{h.patch}
	if g := h.run(next); g.Status != protocol.GatePassed {
		t.Fatalf("the gate after the hostile one: status %s, stdout %q stderr %q", g.Status, g.Stdout, g.Stderr)
	}
	mirrors, err := filepath.Glob(filepath.Join(dataDir, "workspaces", "mirrors", "*.git"))
	if err != nil || len(mirrors) != 1 {
		t.Fatalf("mirrors: %v %v", mirrors, err)
	}
	if v := testkit.Git(t, "", "-C", mirrors[0], "config", "core.repositoryformatversion"); v != "0" {
		t.Errorf("mirror core.repositoryformatversion = %q", v)
	}
	if _, err := os.Stat(filepath.Join(mirrors[0], "hooks", "post-checkout")); err == nil {
		t.Error("the hostile gate wrote a hook into the mirror")
	}
	h.Settled(protocol.KindGate)
}
