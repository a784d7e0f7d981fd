package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// presenceWorkflow: a slow task, then one that depends on it, each with a
// gate.
const presenceWorkflow = `name: presence
` + agentDefaults + `gates:
  - name: exists
    command: [test, -f, README.md]
tasks:
  - id: slow
    gates: [exists]
    prompt: |
      Take a while.
      @sleep 4s
      @write slow.txt
      slow
      @end
  - id: after
    depends_on: [slow]
    gates: [exists]
    prompt: |
      @write after.txt
      after
      @end
`

// fleetJSON is `coordinator fleet -o json` as the tests read it.
type fleetJSON struct {
	Runners []struct {
		Kind    string            `json:"kind"`
		Host    string            `json:"host"`
		Pools   []string          `json:"pools"`
		Labels  map[string]string `json:"labels"`
		Sandbox string            `json:"sandbox"`
		Version string            `json:"version"`
		Slots   int               `json:"slots"`
		Busy    int               `json:"busy"`
		Jobs    []struct {
			JobID      string `json:"job_id"`
			WorkflowID string `json:"workflow_id"`
			NodeID     string `json:"node_id"`
			Gate       string `json:"gate"`
		} `json:"jobs"`
		Stats struct {
			Succeeded   int `json:"succeeded"`
			Failed      int `json:"failed"`
			CacheHits   int `json:"cache_hits"`
			CacheMisses int `json:"cache_misses"`
		} `json:"stats"`
		SeenAt time.Time `json:"seen_at"`
	} `json:"runners"`
	CacheHits   int `json:"cache_hits"`
	CacheMisses int `json:"cache_misses"`
}

func (f *fleet) fleetList() fleetJSON {
	f.t.Helper()
	r := f.cli(30*time.Second, "fleet", "-o", "json")
	if r.code != 0 {
		f.t.Fatalf("fleet -o json:\n%s", r)
	}
	var out fleetJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		f.t.Fatalf("fleet -o json: %v\n%s", err, r.stdout)
	}
	return out
}

// waitFleet waits until `coordinator fleet -o json` satisfies cond.
func (f *fleet) waitFleet(what string, cond func(fleetJSON) bool) fleetJSON {
	f.t.Helper()
	var last fleetJSON
	waitFor(f.t, 60*time.Second, what, func() bool {
		last = f.fleetList()
		return cond(last)
	})
	return last
}

// TestFleetPresenceAndWatch runs a coordinator, a worker and a gate runner
// as separate processes and checks what `coordinator fleet -o json` says
// of the runners (who they are, what they run while they run it, what
// they have done), that `coordinator watch` on a pseudo-terminal keeps a
// progress line below the transitions while on a pipe it prints the plain
// lines only, and that a runner stopped with SIGTERM leaves the list.
func TestFleetPresenceAndWatch(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	worker := f.worker("worker-p", "--concurrency", "2", "--labels", "zone=eu")
	f.gaterunner("gate-p", "--pools", "default,big")

	idle := f.waitFleet("both runners listed", func(r fleetJSON) bool { return len(r.Runners) == 2 })
	w, g := idle.Runners[0], idle.Runners[1] // sorted by kind: agent, then gate
	if w.Kind != "agent" || w.Host != "worker-p" || len(w.Pools) != 1 || w.Pools[0] != "default" || w.Slots != 2 ||
		w.Labels["zone"] != "eu" || w.Sandbox != "process" || w.Version == "" || w.Busy != 0 || w.SeenAt.IsZero() {
		t.Errorf("worker listed as %+v", w)
	}
	if g.Kind != "gate" || g.Host != "gate-p" || strings.Join(g.Pools, ",") != "default,big" || g.Slots != 1 ||
		g.Sandbox != "process" {
		t.Errorf("gate runner listed as %+v", g)
	}

	repo, _ := testkit.Repo(t, map[string]string{"README.md": "presence\n"})
	wfFile := writeFile(t, t.TempDir(), "presence.yaml", presenceWorkflow)
	r := f.cli(time.Minute, "submit", wfFile, "--repo", repo)
	if r.code != 0 {
		t.Fatalf("submit:\n%s", r)
	}
	wf := wfID(t, r)

	// watch on a pseudo-terminal, from now until the workflow ends.
	watch := exec.Command(filepath.Join(binDir, "coordinator"), "watch", wf, "--nats", f.natsURL)
	watch.Dir, watch.Env = f.dir, config.ChildEnv()
	ptmx, err := pty.StartWithSize(watch, &pty.Winsize{Rows: 40, Cols: 160})
	if err != nil {
		t.Fatalf("start watch on a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	var screen bytes.Buffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&screen, ptmx) // ends with EIO once watch has exited
		close(copied)
	}()

	// While the slow task runs, the worker lists it.
	busy := f.waitFleet("the worker to list the running task", func(r fleetJSON) bool {
		return len(r.Runners) == 2 && r.Runners[0].Busy == 1
	})
	if j := busy.Runners[0].Jobs; len(j) != 1 || j[0].WorkflowID != wf || j[0].NodeID != "slow" {
		t.Errorf("busy worker's jobs = %+v", j)
	}

	waited := make(chan error, 1)
	go func() { waited <- watch.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("watch on a terminal: %v", err)
		}
	case <-time.After(2 * time.Minute):
		_ = watch.Process.Kill()
		t.Fatalf("watch did not end within 2m; it showed:\n%s", screen.String())
	}
	<-copied
	shown := screen.String()
	if !strings.Contains(shown, "\r\x1b[2K") {
		t.Errorf("watch on a terminal never redrew a progress line:\n%q", shown)
	}
	if !strings.Contains(shown, "node slow") || !strings.Contains(shown, "running on worker-p") {
		t.Errorf("watch on a terminal lacks the transition lines:\n%s", shown)
	}
	if !strings.Contains(shown, wf+" running: ") {
		t.Errorf("watch on a terminal showed no progress line while the workflow ran:\n%q", shown)
	}
	final := wf + " succeeded: 2/2 nodes done, 0 running, 0 failed, 0 waiting for a human, "
	if !strings.Contains(shown, final) {
		t.Errorf("watch on a terminal did not end on %q:\n%q", final, shown)
	}

	// On a pipe: the plain transition lines, nothing drawn.
	plain := f.cli(time.Minute, "watch", wf)
	if plain.code != 0 || strings.Contains(plain.stdout, "\x1b") || strings.Contains(plain.stdout, "nodes done") ||
		!strings.Contains(plain.stdout, "running on worker-p") {
		t.Errorf("watch on a pipe:\n%s", plain)
	}

	// What the runners did: two agent rounds, two gates (both ran: each
	// node's tree differs), counted by the runner that did them.
	done := f.waitFleet("the runners' stats", func(r fleetJSON) bool {
		return len(r.Runners) == 2 && r.Runners[0].Stats.Succeeded == 2 && r.Runners[1].Stats.Succeeded == 2
	})
	w, g = done.Runners[0], done.Runners[1]
	if w.Busy != 0 || w.Stats.Failed != 0 || w.Stats.CacheHits+w.Stats.CacheMisses != 0 {
		t.Errorf("worker after the workflow: %+v", w)
	}
	if g.Stats.Failed != 0 || g.Stats.CacheMisses != 2 || g.Stats.CacheHits != 0 {
		t.Errorf("gate runner after the workflow: %+v", g)
	}
	if done.CacheHits != g.Stats.CacheHits || done.CacheMisses != g.Stats.CacheMisses {
		t.Errorf("fleet cache totals %d/%d, want the gate runner's %d/%d", done.CacheHits, done.CacheMisses,
			g.Stats.CacheHits, g.Stats.CacheMisses)
	}
	table := f.cli(30*time.Second, "fleet")
	if table.code != 0 || !strings.Contains(table.stdout, "worker-p") || !strings.Contains(table.stdout, "gate-p") ||
		!strings.Contains(table.stdout, "gate cache: 0 hits, 2 misses") {
		t.Errorf("fleet table:\n%s", table)
	}

	// A clean stop removes the worker at once (its entry's TTL is 45 s).
	worker.signal(t, syscall.SIGTERM)
	if err := worker.wait(t, 30*time.Second); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("worker: %v", err)
		}
		t.Errorf("worker exited with %v after SIGTERM", err)
	}
	left := f.fleetList()
	if len(left.Runners) != 1 || left.Runners[0].Host != "gate-p" {
		t.Errorf("after the worker stopped, fleet lists %+v", left.Runners)
	}
}
