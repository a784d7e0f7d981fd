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

// TestFilesAndInterfaces runs its scenarios on one fleet of separate
// processes: nats-server, Redis, `coordinator serve` and two workers.
func TestFilesAndInterfaces(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	workers := []*proc{f.worker("worker-1", "--concurrency", "2"), f.worker("worker-2", "--concurrency", "2")}
	workerLogs := func() string {
		var b strings.Builder
		for _, w := range workers {
			b.WriteString(w.logText())
		}
		return b.String()
	}
	t.Run("Serialization", func(t *testing.T) { t.Parallel(); testFileSerialization(f.sub(t), workerLogs) })
	t.Run("InterfaceLock", func(t *testing.T) { t.Parallel(); testInterfaceLock(f.sub(t)) })
}

// File-conflict serialization (DAG-07, DAG-08): two tasks with overlapping
// files never overlap in time, the later waiting (status names what for)
// and then building on the earlier's work, while a task with disjoint files
// runs alongside them. The order is read from the event log (watch replays
// it), not from timing.
func testFileSerialization(f *fleet, workerLogs func() string) {
	t := f.t
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
	logs := workerLogs()
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

// interfaceWorkflow: api defines api.yaml as an interface; impl, after
// it, changes api.yaml at its first attempt and, told the file is locked,
// puts it back at the next.
const interfaceWorkflow = `name: interfaces
` + agentDefaults + `tasks:
  - id: api
    interface: [api.yaml]
    gates: []
    prompt: |
      @write api.yaml
      v1
      @end
  - id: impl
    depends_on: [api]
    gates: []
    prompt: |
      @if-no-feedback
      @write api.yaml
      v2
      @end
      @endif
      @if-feedback locked interface files (api.yaml) defined by api
      @write api.yaml
      v1
      @end
      @endif
      @write impl.txt
      impl
      @end
`

// Interface locking (HIER-03) on the fleet: the worker's summary of impl's
// patch shows it changes api.yaml, locked since api succeeded; the round
// fails with feedback naming the file and api, and the next attempt,
// leaving the interface alone, is accepted.
func testInterfaceLock(f *fleet) {
	t := f.t
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "interfaces\n"})
	wfFile := writeFile(t, t.TempDir(), "interfaces.yaml", interfaceWorkflow)
	wf := submitWait(t, f, 3*time.Minute, wfFile, repo)
	s, _ := f.status(wf)
	if n := s.node(t, "impl"); n.Status != "succeeded" || n.Attempt != 2 {
		t.Fatalf("impl = %+v, want succeeded at attempt 2", n)
	}
	r := f.cli(30*time.Second, "show", wf, "impl")
	if !strings.Contains(r.stdout, "interface_locked: the patch changes locked interface files (api.yaml) defined by api") {
		t.Errorf("show impl does not give attempt 1's interface failure:\n%s", r)
	}
	branch := "supervisor/" + wf
	if got := fileAt(t, repo, branch, "api.yaml"); got != "v1\n" {
		t.Errorf("api.yaml = %q, want api's", got)
	}
	if got := fileAt(t, repo, branch, "impl.txt"); got != "impl\n" {
		t.Errorf("impl.txt = %q", got)
	}
}
