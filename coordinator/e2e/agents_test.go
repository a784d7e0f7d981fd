package e2e

import (
	"encoding/json"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// agentsWorkflow runs two nodes on Claude Code and one on Codex (the
// stand-ins in worker/internal/testcli, on the workers' PATH), with a
// budget none of them reaches.
const agentsWorkflow = `name: agents
max_cost_usd: 100
defaults:
  agent: {adapter: claude-code, model: claude-sonnet-4-5, max_turns: 10}
  timeout: 2m
tasks:
  - id: hello
    gates: []
    prompt: "Add a greeting.\n@write hello.txt\nhello\n@end\n"
  - id: bye
    gates: []
    max_cost_usd: 5
    prompt: "Add a farewell.\n@write bye.txt\nbye\n@end\n"
  - id: codex
    agent: {adapter: codex, model: gpt-5-codex}
    gates: []
    prompt: "Add a note.\n@write note.txt\nnote\n@end\n"
`

// agentsPrices is the coordinator's price table: it prices Codex's runs,
// which report tokens and no cost.
const agentsPrices = `prices:
  - {model: gpt-5-codex, input: 1.25, cached_input: 0.125, output: 10}
`

// usage and spend are the parts of `status -o json` these tests read.
type usage struct {
	Input  int64 `json:"input_tokens"`
	Cached int64 `json:"cached_input_tokens"`
	Output int64 `json:"output_tokens"`
}

type spendStatus struct {
	Runs          int     `json:"runs"`
	Usage         usage   `json:"usage"`
	CostUSD       float64 `json:"cost_usd"`
	CostEstimated bool    `json:"cost_estimated"`
	MaxCostUSD    float64 `json:"max_cost_usd"`
	// ReviewSpend is the review gates' reviewers' part of the above.
	ReviewSpend *struct {
		Runs    int     `json:"runs"`
		CostUSD float64 `json:"cost_usd"`
	} `json:"review_spend"`
	LastRun *struct {
		Adapter       string  `json:"adapter"`
		Model         string  `json:"model"`
		SessionID     string  `json:"session_id"`
		Turns         int     `json:"turns"`
		Usage         usage   `json:"usage"`
		CostUSD       float64 `json:"cost_usd"`
		CostKnown     bool    `json:"cost_known"`
		CostEstimated bool    `json:"cost_estimated"`
		Success       bool    `json:"success"`
		Text          string  `json:"text"`
	} `json:"last_run"`
	ID string `json:"id"`
}

type agentsStatus struct {
	spendStatus
	Status string        `json:"status"`
	Nodes  []spendStatus `json:"nodes"`
}

// TestAgentAdapters runs a workflow whose agents are Claude Code and
// Codex, through their adapters, on a fleet of separate processes
// (ARCH-07, WORK-03, WORK-07, WORK-08): each node's status names its last
// run's adapter, model, session and turns, with its tokens and cost
// (Claude's as its CLI reported it, Codex's estimated from the
// coordinator's price table), and the workflow's totals sum the nodes';
// the agent log holds the parsed events.
func TestAgentAdapters(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordArgs = []string{"--config", writeFile(t, t.TempDir(), "coordinator.yaml", agentsPrices)}
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", "--concurrency", "3")
	f.gaterunner("gate-1")

	repo, base := testkit.Repo(t, map[string]string{"README.md": "agents\n"})
	wfFile := writeFile(t, t.TempDir(), "agents.yaml", agentsWorkflow)
	wf := submitWait(t, f, 3*time.Minute, wfFile, repo)

	r := f.cli(30*time.Second, "status", wf, "-o", "json")
	var s agentsStatus
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || r.code != 0 {
		t.Fatalf("status: %v\n%s", err, r)
	}
	var sum usage
	var cost float64
	for _, n := range s.Nodes {
		run := n.LastRun
		if run == nil || n.Runs != 1 || !run.Success || run.SessionID == "" || run.Turns == 0 || run.Usage.Input == 0 ||
			run.Usage != n.Usage || !run.CostKnown || run.CostUSD <= 0 || run.CostUSD != n.CostUSD || run.Text != "" {
			t.Errorf("node %s: runs %d, last run %+v, usage %+v, cost %v", n.ID, n.Runs, run, n.Usage, n.CostUSD)
			continue
		}
		switch n.ID {
		case "hello", "bye":
			if run.Adapter != "claude-code" || run.Model != "claude-sonnet-4-5" || run.CostEstimated {
				t.Errorf("node %s: %+v, want claude-code's own cost", n.ID, run)
			}
		case "codex":
			want := (float64(run.Usage.Input-run.Usage.Cached)*1.25 + float64(run.Usage.Cached)*0.125 + float64(run.Usage.Output)*10) / 1e6
			if run.Adapter != "codex" || !run.CostEstimated || math.Abs(run.CostUSD-want) > 1e-12 {
				t.Errorf("node codex: %+v, want an estimated $%g", run, want)
			}
		}
		sum.Input, sum.Cached, sum.Output = sum.Input+n.Usage.Input, sum.Cached+n.Usage.Cached, sum.Output+n.Usage.Output
		cost += n.CostUSD
	}
	if s.Runs != 3 || s.Usage != sum || math.Abs(s.CostUSD-cost) > 1e-12 || !s.CostEstimated || s.MaxCostUSD != 100 {
		t.Errorf("workflow totals: runs %d usage %+v cost %v estimated %v budget %v; nodes sum to usage %+v cost %v",
			s.Runs, s.Usage, s.CostUSD, s.CostEstimated, s.MaxCostUSD, sum, cost)
	}

	table := f.cli(30*time.Second, "status", wf)
	for _, want := range []string{"LAST RUN", "claude-code claude-sonnet-4-5", "~$", "of $100.00", "of $5.00"} {
		if !strings.Contains(table.stdout, want) {
			t.Errorf("status does not show %q:\n%s", want, table.stdout)
		}
	}
	w := f.cli(time.Minute, "watch", wf)
	if w.code != 0 || !regexp.MustCompile(`node hello\s+agent succeeded \(exit 0\): claude-code claude-sonnet-4-5, \d+ turns, \d+/\d+ tokens, \$0\.\d{4}`).MatchString(w.stdout) ||
		!regexp.MustCompile(`node codex\s+agent succeeded \(exit 0\): codex, \d+ turns, \d+/\d+ tokens, ~\$`).MatchString(w.stdout) {
		t.Errorf("watch does not summarize the runs:\n%s", w)
	}
	logs := f.cli(30*time.Second, "logs", wf, "hello")
	for _, want := range []string{"[supervisor] running: claude -p --output-format stream-json --verbose --permission-mode acceptEdits --model claude-sonnet-4-5 --max-turns 10",
		"[event] ", "claude-code: success=true"} {
		if !strings.Contains(logs.stdout, want) {
			t.Errorf("the agent log lacks %q:\n%s", want, logs)
		}
	}
	testLogsFollow(f)
	if got, want := branchChanges(t, repo, base, "supervisor/"+wf), []string{"A\tbye.txt", "A\thello.txt", "A\tnote.txt"}; !equalStrings(got, want) {
		t.Errorf("changes delivered = %q, want %q", got, want)
	}
}

// logsWorkflow's agent reports a line after a pause, while logs -f
// follows it.
const logsWorkflow = `name: live
defaults:
  agent: {adapter: claude-code}
  timeout: 2m
tasks:
  - id: slow
    gates: []
    prompt: "Take your time.\n@sleep 8s\n@print the live line\n@write slow.txt\nslow\n@end\n"
`

// testLogsFollow: logs -f prints the agent's events live, as its worker
// parses them, and ends when the node does.
func testLogsFollow(f *fleet) {
	t := f.t
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "live\n"})
	wf := submit(t, f, writeFile(t, t.TempDir(), "live.yaml", logsWorkflow), repo)
	f.waitNode(wf, "slow", "running", 2*time.Minute)
	r := f.cli(3*time.Minute, "logs", "-f", wf, "slow")
	_, live, found := strings.Cut(r.stdout, "==> following "+wf+" slow live")
	if r.code != 0 || !found || !strings.Contains(live, "] text: the live line") ||
		!strings.Contains(live, "] summary: claude-code: success=true") || !strings.HasSuffix(live, "==> node slow succeeded <==\n") {
		t.Errorf("logs -f printed no live line, or did not end with the node:\n%s", r)
	}
}
