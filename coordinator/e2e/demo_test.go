package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestDemo runs what `make run` runs: `coordinator demo`, the embedded
// default (NATS, coordinator, worker and gate runner in one process) on a
// sample Go repository, with go vet and go test as gates. It shows the
// closed loop: add-shout's first attempt has a bug that go test catches;
// the node is retried after the default policy's delay (RETRY-08) with the
// failure as feedback naming TestShout (RETRY-09), and its second attempt
// fixes it. The demo must succeed and end with the result branch: three
// commits, six files. While it runs, the dashboard whose address it
// prints shows the workflow's DAG.
func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "coordinator"), "demo",
		"--agent-dir", binDir, "--dir", dir, "--keep")
	cmd.Env = config.ChildEnv()
	// The output is read as it comes: once the demo printed the dashboard's
	// address and the workflow's id, the dashboard must show the workflow's
	// DAG while the demo runs.
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var out strings.Builder
	var dagErr error
	dagShown := false
	read := make(chan struct{})
	go func() {
		defer close(read)
		dashURL := ""
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line + "\n")
			if m := regexp.MustCompile(`^dashboard: (http://127\.0\.0\.1:\d+/) `).FindStringSubmatch(line); m != nil {
				dashURL = m[1]
			}
			if id := regexp.MustCompile(`^wf-[a-z2-7]{12}$`).FindString(line); id != "" && dashURL != "" && !dagShown {
				dagShown, dagErr = true, demoDAG(dashURL, id)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	_ = pw.Close()
	<-read
	text := out.String()
	if err != nil {
		t.Fatalf("coordinator demo: %v\n%s", err, text)
	}
	if !dagShown || dagErr != nil {
		t.Errorf("the dashboard did not show the demo's DAG while it ran (address and id printed: %v): %v\n%s", dagShown, dagErr, text)
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

	// The loop: add-shout took two attempts, the other tasks one. Its
	// first attempt failed go test; the retry was announced with the
	// feedback, which names the failing test, and started no earlier than
	// announced.
	count := func(re string) int { return len(regexp.MustCompile(re).FindAllString(text, -1)) }
	for node, attempts := range map[string]int{"add-goodbye": 1, "add-shout": 2, "document": 1} {
		if got := count(`node ` + node + `\s+ready \(attempt \d+\)`); got != attempts {
			t.Errorf("node %s became ready %d times, want %d (one per attempt):\n%s", node, got, attempts, text)
		}
		if got := count(`node ` + node + `\s+running on `); got != attempts {
			t.Errorf("node %s started %d times, want %d:\n%s", node, got, attempts, text)
		}
	}
	failed := idx("node add-shout               gate test failed (exit 1)")
	retry := regexp.MustCompile(`^(\d\d:\d\d:\d\d)  node add-shout\s+retrying: attempt 2 at (\d\d:\d\d:\d\d) with feedback \(gates did not pass: test failed\)$`)
	var m []string
	if failed >= 0 && failed+1 < len(lines) {
		m = retry.FindStringSubmatch(lines[failed+1])
	}
	if m == nil {
		t.Fatalf("the demo does not show add-shout's go test failing, then the retry announced:\n%s", text)
	}
	if fb := lines[failed+2]; !strings.HasPrefix(strings.TrimSpace(fb), "feedback: ") || !strings.Contains(fb, "TestShout") {
		t.Errorf("the retry's feedback line %q does not name TestShout:\n%s", fb, text)
	}
	if count(`node add-shout\s+gate test failed`) != 1 || count(`retrying: attempt`) != 1 || count(`escalated`) != 0 {
		t.Errorf("the demo retried more than once, or escalated:\n%s", text)
	}
	ready := idx("node add-shout               ready (attempt 2)")
	if ready < failed {
		t.Fatalf("add-shout's attempt 2 did not follow the retry:\n%s", text)
	}
	at, _ := time.Parse(time.TimeOnly, m[2])
	began, _ := time.Parse(time.TimeOnly, lines[ready][:8])
	if d := at.Sub(began); d > 0 && d < 12*time.Hour { // (not across midnight)
		t.Errorf("add-shout's attempt 2 became ready at %s, before the announced %s", lines[ready][:8], m[2])
	}
	// What reached the branch is the second attempt's fixed Shout.
	repo := filepath.Join(dir, "greet")
	branch := strings.TrimSpace(testkit.Git(t, repo, "branch", "--list", "supervisor/*", "--format=%(refname:short)"))
	if shout := fileAt(t, repo, branch, "shout.go"); !strings.Contains(shout, "strings.ToUpper(Hello(name))") {
		t.Errorf("shout.go on %s is not the fixed one:\n%s", branch, shout)
	}
}

// demoDAG fetches the workflow's page from the demo's dashboard (reads are
// open on 127.0.0.1) and checks it draws the demo's DAG: its three nodes,
// and document's dependencies as edges.
func demoDAG(base, wf string) error {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + "workflows/" + wf)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %sworkflows/%s: %s", base, wf, resp.Status)
	}
	for _, want := range []string{`<svg class="dag"`, `data-node="add-goodbye"`, `data-node="add-shout"`, `data-node="document"`,
		`data-from="add-shout" data-to="document"`, `data-from="add-goodbye" data-to="document"`} {
		if !strings.Contains(string(body), want) {
			return fmt.Errorf("the workflow page lacks %s", want)
		}
	}
	return nil
}
