package cli_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
	"github.com/supervisorhq/supervisor/coordinator/internal/cli"
)

// TestBenchSubcommand runs `coordinator bench` on the raw scenario: the
// same report as supervisor-bench, and its usage errors exit 64.
func TestBenchSubcommand(t *testing.T) {
	var out, errOut bytes.Buffer
	code := cli.Main([]string{"bench", "--scenarios", "raw", "--raw-messages", "25", "--dir", t.TempDir(), "-o", "json"}, &out, &errOut)
	if code != cli.ExitOK {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not a bench report: %v\n%s", err, out.String())
	}
	if len(rep.Results) != 1 || rep.Results[0].Scenario != bench.ScenarioRaw || rep.Results[0].Count != 25 {
		t.Fatalf("results %+v; want one raw row of 25 messages", rep.Results)
	}
	out.Reset()
	errOut.Reset()
	if code := cli.Main([]string{"bench", "--scenarios", "nope"}, &out, &errOut); code != cli.ExitUsage {
		t.Errorf("unknown scenario: exit %d, want %d (stderr %q)", code, cli.ExitUsage, errOut.String())
	}
	if !bytes.Contains(errOut.Bytes(), []byte(`unknown scenario "nope"`)) {
		t.Errorf("stderr %q does not name the unknown scenario", errOut.String())
	}
}
