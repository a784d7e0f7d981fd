package cli

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The CLI on an in-process fleet with limits: a workflow file over the
// request limit is refused, and a submission past the in-flight limit,
// each with exit 75 (ExitRefused, not 69 "unreachable") and a message
// naming the flag; once the running workflow is cancelled, the same
// submission is accepted (LIM-25, LIM-26).
func TestSubmitRefusedUnderLimits(t *testing.T) {
	run := cliFleet(t, fleet.Options{Limits: service.Limits{MaxRequestBytes: 16 << 10, MaxWorkflowsInFlight: 1}})
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "limits\n"})
	dir := t.TempDir()
	wf := filepath.Join(dir, "wf.yaml")
	const slow = `name: slow
defaults:
  agent: {command: [sleep, "60"]}
  allow_empty: true
tasks:
  - {id: a, prompt: a, gates: []}
`
	testkit.WriteFile(t, wf, slow)
	big := filepath.Join(dir, "big.yaml")
	testkit.WriteFile(t, big, slow+"# "+strings.Repeat("x", 32<<10)+"\n")

	wantCode(t, run("submit", big, "--repo", repo), ExitRefused, "--max-request-bytes")

	r := run("submit", wf, "--repo", repo)
	wantCode(t, r, 0)
	id := strings.Fields(r.stdout)[0]
	wantCode(t, run("submit", wf, "--repo", repo), ExitRefused, "--max-workflows-in-flight")

	wantCode(t, run("cancel", id), 0)
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the cancelled workflow to finish", func() bool {
		return run("status", id).code == ExitCancelled
	})
	wantCode(t, run("submit", wf, "--repo", repo), 0)
}

// The limit flags: their defaults are service.DefaultLimits, sizes parse
// with units, and a bad value is a usage error naming the flag.
func TestLimitFlags(t *testing.T) {
	parse := func(args ...string) (service.Limits, error) {
		t.Helper()
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		addLimitFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		v := viper.New()
		if err := v.BindPFlags(fs); err != nil {
			t.Fatal(err)
		}
		return limits(v)
	}
	if got, err := parse(); err != nil || !reflect.DeepEqual(got, service.DefaultLimits()) {
		t.Errorf("defaults: %+v, %v; want %+v", got, err, service.DefaultLimits())
	}
	got, err := parse("--max-request-bytes", "64KiB", "--submit-rate", "0", "--max-nodes-in-flight", "7")
	if err != nil || got.MaxRequestBytes != 64<<10 || got.SubmitRate != 0 || got.MaxNodesInFlight != 7 {
		t.Errorf("set: %+v, %v", got, err)
	}
	for _, args := range [][]string{
		{"--max-request-bytes", "lots"},
		{"--max-bundle-bytes", "2GiB"},
		{"--max-workflows-in-flight", "-1"},
		{"--submit-rate", "5", "--submit-window", "0s"},
	} {
		_, err := parse(args...)
		var ee *ExitError
		if flag := strings.TrimPrefix(args[0], "--"); !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), flag) {
			t.Errorf("%v: %v; want a usage error", args, err)
		}
	}
}
