package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// filesWorkflow: first and second declare overlapping files and nothing
// else orders them; aside's files are disjoint from both. first and aside
// meet (each signals, then waits for the other's signal), so they can only
// finish if they run at the same time; first also waits for the test's
// go-ahead. second appends to the file first writes. %[1]s is the meeting
// directory.
const filesWorkflow = `name: files
` + agentDefaults + `tasks:
  - id: first
    files: [shared.txt, "src/*.go"]
    gates: []
    prompt: |
      @signal %[1]s/first
      @await %[1]s/aside
      @await %[1]s/go
      @write shared.txt
      first
      @end
  - id: second
    files: [shared.txt]
    gates: []
    prompt: |
      @append shared.txt
      second
      @end
  - id: aside
    files: [docs/]
    gates: []
    prompt: |
      @signal %[1]s/aside
      @await %[1]s/first
      @write docs/aside.md
      aside
      @end
`

// TestFileConflictSerialization (DAG-07, DAG-08) on a fleet of separate
// processes: two tasks with overlapping files never overlap in time, the
// later waiting (status names what for) and then building on the earlier's
// work, while a task with disjoint files runs alongside them. The order is
// read from the event log (watch replays it), not from timing.
func TestFileConflictSerialization(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", "--concurrency", "2")
	f.worker("worker-2", "--concurrency", "2")
	repo, base := testkit.Repo(t, map[string]string{"README.md": "files\n"})
	meet := t.TempDir()
	wfFile := writeFile(t, t.TempDir(), "files.yaml", fmt.Sprintf(filesWorkflow, meet))
	wf := submit(t, f, wfFile, repo)

	// first and aside are running (they met: they run at once); second
	// waits for first's files.
	waitFor(t, 2*time.Minute, "first and aside to meet", func() bool {
		return exists(filepath.Join(meet, "first")) && exists(filepath.Join(meet, "aside"))
	})
	s, _ := f.status(wf)
	if n := s.node(t, "second"); n.Status != "pending" || !equalStrings(n.WaitingForFiles, []string{"first"}) {
		t.Errorf("second is %s waiting for %v; want pending, waiting for first's files", n.Status, n.WaitingForFiles)
	}
	if r := f.cli(30*time.Second, "status", wf); !regexp.MustCompile(`second\s+pending.*waiting for files held by first`).MatchString(r.stdout) {
		t.Errorf("status does not say what second waits for:\n%s", r.stdout)
	}
	writeFile(t, meet, "go", "")

	w := f.cli(3*time.Minute, "watch", wf)
	if w.code != 0 {
		t.Fatalf("watch: want exit 0\n%s", w)
	}
	at := func(node, what string) int {
		t.Helper()
		re := regexp.MustCompile(`(?m)^.*node ` + node + `\s+` + what)
		loc := re.FindStringIndex(w.stdout)
		if loc == nil {
			t.Fatalf("watch printed no %q for %s:\n%s", what, node, w.stdout)
		}
		return loc[0]
	}
	// Overlapping: second is ready only after first has finished.
	if at("second", `ready`) < at("first", `succeeded`) {
		t.Errorf("second became ready before first finished:\n%s", w.stdout)
	}
	// Disjoint: aside ran while first ran (each started before the other's agent was done).
	if at("aside", "running on") > at("first", "agent succeeded") || at("first", "running on") > at("aside", "agent succeeded") {
		t.Errorf("aside and first did not run at once:\n%s", w.stdout)
	}

	branch := "supervisor/" + wf
	if got := fileAt(t, repo, branch, "shared.txt"); got != "first\nsecond\n" {
		t.Errorf("shared.txt = %q: second did not build on first's work", got)
	}
	want := []string{"A\tdocs/aside.md", "A\tshared.txt"}
	if got := branchChanges(t, repo, base, branch); !equalStrings(got, want) {
		t.Errorf("changes %q, want %q", got, want)
	}
	// The workers held the nodes' file locks in the state store.
	logs := f.procNamed("worker-1").logText() + f.procNamed("worker-2").logText()
	for _, node := range []string{"first", "second", "aside"} {
		if !strings.Contains(logs, "files/"+wf+"/"+node+"=") {
			t.Errorf("no worker logged holding %s's file lock", node)
		}
	}
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
