package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/config"
)

// TestDemo runs what `make run` runs: `coordinator demo`, the embedded
// default (NATS, coordinator, worker and gate runner in one process) on a
// sample Go repository, with go vet and go test as gates. It must succeed
// and end with the result branch: three commits, six files.
func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "coordinator"), "demo",
		"--agent-dir", binDir, "--dir", dir)
	cmd.Env = config.ChildEnv()
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("coordinator demo: %v\n%s", err, text)
	}
	for _, want := range []string{
		"node add-goodbye", "node add-shout", "node document",
		"gate vet passed (exit 0)", "gate test passed (exit 0)",
		"greet-demo: document", "greet-demo: add-shout", "greet-demo: add-goodbye",
		"6 files changed, 54 insertions(+)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	if !regexp.MustCompile(`workflow wf-[a-z2-7]{12} succeeded in`).MatchString(text) {
		t.Errorf("demo output lacks the success line:\n%s", text)
	}
	// The document task depends on both others: it must start after both
	// were integrated.
	lines := strings.Split(text, "\n")
	idx := func(sub string) int {
		for i, l := range lines {
			if strings.Contains(l, sub) {
				return i
			}
		}
		return -1
	}
	doc := idx("node document                ready")
	if doc < 0 || doc < idx("node add-goodbye             succeeded") || doc < idx("node add-shout               succeeded") {
		t.Errorf("document became ready before its dependencies succeeded:\n%s", text)
	}
}
