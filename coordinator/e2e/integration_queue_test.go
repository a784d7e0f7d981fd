package e2e

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// portsWorkflow: two sibling tasks each pick a port for their service in
// ports/. Each passes its own gate alone, but both pick 8080 at first; the
// workflow's integration gate, which demands different ports, fails on the
// second of them on top of the first. The scripted agent moves off the
// port when the feedback says the two clash.
const portsWorkflow = `name: ports
` + agentDefaults + `gates:
  - name: own
    command: [gatehelper, print, own-ok]
  - name: distinct-ports
    command: [gatehelper, sleep, 2s, distinct, ports]
integration_gates: [distinct-ports]
tasks:
  - id: web
    gates: [own]
    prompt: |
      Pick a port for web in ports/web.txt.
      @if-no-feedback
      @write ports/web.txt
      8080
      @end
      @endif
      @if-feedback both hold 8080
      @print moving off the port the other service took
      @write ports/web.txt
      8081
      @end
      @endif
  - id: api
    gates: [own]
    prompt: |
      Pick a port for api in ports/api.txt.
      @if-no-feedback
      @write ports/api.txt
      8080
      @end
      @endif
      @if-feedback both hold 8080
      @print moving off the port the other service took
      @write ports/api.txt
      8082
      @end
      @endif
`

// queueStatus is what this test reads of `status -o json`.
type queueStatus struct {
	Status string `json:"status"`
	Nodes  []struct {
		ID          string `json:"id"`
		Status      string `json:"status"`
		Attempt     int    `json:"attempt"`
		Reason      string `json:"reason"`
		Integration *struct {
			Position    int      `json:"position"`
			Speculation string   `json:"speculation"`
			Integrated  int      `json:"integrated"`
			Ahead       []string `json:"ahead"`
		} `json:"integration"`
	} `json:"nodes"`
}

// TestIntegrationQueue (GIT-08) runs on a fleet of separate processes
// (nats-server, Redis, `coordinator serve`, a worker, a gate runner) a
// workflow of two siblings that pass their own gates but conflict: the
// integration queue tests the second on top of the first, its integration
// gate fails, the failure goes back to its agent as feedback naming the
// first, and its next attempt lands. status -o json shows a node waiting
// in the queue; watch prints the integration gates' results.
func TestIntegrationQueue(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", "--concurrency", "2")
	f.gaterunner("gate-1", "--concurrency", "2")

	repo, _ := testkit.Repo(t, map[string]string{"README.md": "ports\n"})
	wf := submit(t, f, writeFile(t, t.TempDir(), "ports.yaml", portsWorkflow), repo)

	// A node waits in the queue while its integration gate runs (2 s).
	var queued string
	waitFor(t, 2*time.Minute, "a node queued for integration in status -o json", func() bool {
		r := f.cli(30*time.Second, "status", wf, "-o", "json")
		var s queueStatus
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("status JSON: %v\n%s", err, r)
		}
		for _, n := range s.Nodes {
			if q := n.Integration; q != nil && n.Status == "integrating" && q.Position >= 1 && q.Speculation != "" {
				queued = n.ID
				return true
			}
		}
		return false
	})

	w := f.cli(4*time.Minute, "watch", wf)
	if w.code != 0 {
		t.Fatalf("watch: want exit 0 (succeeded)\n%s", w)
	}
	for _, re := range []string{
		`node (web|api)\s+queued for integration \(attempt 1\)`,
		`node (web|api)\s+integration gate distinct-ports dispatched on the branch`,
		`node (web|api)\s+integration gate distinct-ports failed \(exit 1\) on speculation \w+`,
		`node (web|api)\s+retrying: attempt 2 at \d\d:\d\d:\d\d with feedback \(integration gates did not pass on top of (web|api): distinct-ports failed\)`,
		`node (web|api)\s+integration gate distinct-ports passed \(exit 0\)`,
		`workflow ` + wf + `\s+succeeded`,
	} {
		if !regexp.MustCompile(re).MatchString(w.stdout) {
			t.Errorf("watch printed nothing matching %s:\n%s", re, w.stdout)
		}
	}

	// One of the two retried, told it clashed with the other; both landed.
	var s queueStatus
	if r := f.cli(30*time.Second, "status", wf, "-o", "json"); json.Unmarshal([]byte(r.stdout), &s) != nil || s.Status != "succeeded" {
		t.Fatalf("status: %s", r)
	}
	retried := ""
	for _, n := range s.Nodes {
		if n.Status != "succeeded" || n.Integration != nil {
			t.Errorf("node %s: %s, queue %+v; want succeeded, out of the queue", n.ID, n.Status, n.Integration)
		}
		if n.Attempt == 2 {
			retried = n.ID
		}
	}
	other := map[string]string{"web": "api", "api": "web"}[retried]
	if other == "" {
		t.Fatalf("no node took a second attempt: %+v (queued first: %s)", s.Nodes, queued)
	}
	if !strings.Contains(w.stdout, "integration gates did not pass on top of "+other+": distinct-ports failed") {
		t.Errorf("%s's retry does not name %s:\n%s", retried, other, w.stdout)
	}
	logs := f.cli(30*time.Second, "logs", wf, retried)
	if !strings.Contains(logs.stdout, "moving off the port the other service took") {
		t.Errorf("%s's attempt 2 did not act on the feedback:\n%s", retried, logs.stdout)
	}

	branch := "supervisor/" + wf
	web, api := fileAt(t, repo, branch, "ports/web.txt"), fileAt(t, repo, branch, "ports/api.txt")
	if web == api || web == "" || api == "" {
		t.Errorf("on %s, web's port %q and api's %q; want two different ports", branch, web, api)
	}
}
