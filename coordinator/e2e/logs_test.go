package e2e

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// bigLogsWorkflow has six gates whose logs are each about 340 KiB (the
// numbers 1 to 60000): their tails at full length (192 KiB each) would
// not fit together in one NATS message (1 MiB).
const bigLogsWorkflow = `name: big-logs
` + agentDefaults + `gates:
  - {name: g1, command: [seq, "1", "60000"]}
  - {name: g2, command: [seq, "1", "60000"]}
  - {name: g3, command: [seq, "1", "60000"]}
  - {name: g4, command: [seq, "1", "60000"]}
  - {name: g5, command: [seq, "1", "60000"]}
  - {name: g6, command: [seq, "1", "60000"]}
tasks:
  - id: a
    gates: [g1, g2, g3, g4, g5, g6]
    prompt: "@write a.txt\na\n@end\n"
`

// TestLogsFitOneReply: coordinator logs of a node whose six gate logs
// together exceed NATS's max payload prints every log's tail, each marked
// with how much it shows, in one reply under the limit, and exits 0 (it
// used to time out and exit 69, "unreachable"); --log NAME prints one
// gate's log whole, streamed from the logs bucket; an unknown name is a
// usage error that lists the node's logs.
func TestLogsFitOneReply(t *testing.T) {
	t.Parallel()
	f := newFleet(t, crashAckWait)
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1")
	f.gaterunner("gate-1", "--concurrency", "3")
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "base\n"})
	wf := submitWait(t, f, 3*time.Minute, writeFile(t, t.TempDir(), "big.yaml", bigLogsWorkflow), repo)

	r := f.cli(time.Minute, "logs", wf, "a")
	if r.code != 0 {
		t.Fatalf("logs of six large gate logs: %s", r)
	}
	if len(r.stdout) >= 1<<20 {
		t.Errorf("logs printed %d bytes, more than one NATS message holds", len(r.stdout))
	}
	tail := regexp.MustCompile(`==> gate (g\d) \(\S+\) \[tail: last (\d+) of (\d+) bytes; --log "g\d" prints it whole\] <==`)
	marks := tail.FindAllStringSubmatch(r.stdout, -1)
	if len(marks) != 6 {
		t.Fatalf("logs shows %d gate tails, want 6:\n%.2000s", len(marks), r.stdout)
	}
	for _, m := range marks {
		shown, _ := strconv.Atoi(m[2])
		size, _ := strconv.Atoi(m[3])
		if shown <= 0 || shown >= size || size < 300<<10 {
			t.Errorf("gate %s: shows %d of %d bytes", m[1], shown, size)
		}
	}
	if !strings.Contains(r.stdout, "\n59999\n60000\n") {
		t.Errorf("the tails do not end with the gates' last lines")
	}

	one := f.cli(time.Minute, "logs", wf, "a", "--log", "g3")
	var seq strings.Builder
	for i := 1; i <= 60000; i++ {
		seq.WriteString(strconv.Itoa(i) + "\n")
	}
	if one.code != 0 || !strings.Contains(one.stdout, "\n"+seq.String()) || len(one.stdout) < seq.Len() {
		t.Errorf("logs --log g3 does not print the gate's whole output (exit %d, %d bytes):\n%.500s", one.code, len(one.stdout), one.stderr)
	}
	bad := f.cli(time.Minute, "logs", wf, "a", "--log", "nope")
	if bad.code != 64 || !strings.Contains(bad.stderr, `has no log "nope"; it has "agent", "g1"`) {
		t.Errorf("logs --log nope: %s", bad)
	}
}
