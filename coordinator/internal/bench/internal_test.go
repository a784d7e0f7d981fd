package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
)

func TestSplit(t *testing.T) {
	for n, want := range map[int][]int{1: {1}, 500: {500}, 501: {251, 250}, 1001: {334, 334, 333}} {
		if got := split(n); !slices.Equal(got, want) {
			t.Errorf("split(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestWorkflowYAMLIsValid(t *testing.T) {
	for _, c := range []struct {
		chain, gated bool
	}{{false, false}, {false, true}, {true, false}} {
		spec, err := workflow.Parse("w.yaml", workflowYAML("bench-x", MaxTasksPerWorkflow, c.chain, c.gated))
		if err != nil {
			t.Fatalf("chain %v gated %v: %v", c.chain, c.gated, err)
		}
		if len(spec.Tasks) != MaxTasksPerWorkflow {
			t.Fatalf("%d tasks", len(spec.Tasks))
		}
		last := spec.Tasks[len(spec.Tasks)-1]
		if !slices.Equal(last.Command, NoopCommand) {
			t.Errorf("agent %q, want %q", last.Command, NoopCommand)
		}
		if c.chain != (len(last.DependsOn) == 1) || c.gated != (len(last.Gates) == 1) {
			t.Errorf("chain %v gated %v: last task depends on %v, gates %v", c.chain, c.gated, last.DependsOn, last.Gates)
		}
	}
}

func TestQuantiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	if p50, p99 := quantiles(ds); p50 != 50 || p99 != 99 {
		t.Errorf("p50 %v, p99 %v; want 50 and 99", p50, p99)
	}
	if p50, p99 := quantiles(nil); p50 != 0 || p99 != 0 {
		t.Errorf("empty: %v %v", p50, p99)
	}
}
