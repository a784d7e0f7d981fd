package workflow

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/gates"
)

// integration_gates (GIT-08) names gates resolved like a task's: from the
// workflow's gates section or the lower sources, dependencies included. A
// task without a gates section runs every workflow gate but those, and an
// unknown name is a problem at its line.
func TestParseIntegrationGates(t *testing.T) {
	const head = "name: w\ndefaults:\n  agent: {command: [a]}\n"
	lower := gates.NewSet(gates.Gate{Name: "build", Command: []string{"make"}, Pool: "default", Timeout: time.Minute})
	cases := []struct {
		name, yaml string
		// want: the spec's integration gates, each task's gates, and the
		// names of the spec's gate definitions; or problem, an error.
		integration, taskGates, defs []string
		problem                      string
	}{{
		name: "named in the gates section: not run by a task without a gates section",
		yaml: head + "gates:\n  - {name: unit, command: [u]}\n  - {name: combined, command: [c]}\n" +
			"integration_gates: [combined]\ntasks:\n  - {id: t, prompt: p}\n",
		integration: []string{"combined"}, taskGates: []string{"unit"}, defs: []string{"unit", "combined"},
	}, {
		name: "a lower source's gate, with a dependency",
		yaml: head + "gates:\n  - {name: combined, command: [c], depends_on: [build]}\n" +
			"integration_gates: [combined]\ntasks:\n  - {id: t, prompt: p, gates: []}\n",
		integration: []string{"combined"}, taskGates: []string{}, defs: []string{"combined", "build"},
	}, {
		name:    "unknown",
		yaml:    head + "integration_gates: [nope]\ntasks:\n  - {id: t, prompt: p}\n",
		problem: `wf.yaml:4:21: integration_gates names unknown gate "nope"`,
	}, {
		name:    "not a list",
		yaml:    head + "integration_gates: combined\ntasks:\n  - {id: t, prompt: p}\n",
		problem: "integration_gates must be a list of names",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, err := ParseWithOptions("wf.yaml", []byte(c.yaml), Options{BuiltinGates: lower})
			if c.problem != "" {
				if err == nil || !strings.Contains(err.Error(), c.problem) {
					t.Fatalf("err = %v; want %q", err, c.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var defs []string
			for _, g := range spec.Gates {
				defs = append(defs, g.Name)
			}
			if !reflect.DeepEqual(spec.IntegrationGates, c.integration) || !reflect.DeepEqual(spec.Tasks[0].Gates, c.taskGates) ||
				!reflect.DeepEqual(defs, c.defs) {
				t.Fatalf("integration %v, task gates %v, definitions %v; want %v, %v, %v",
					spec.IntegrationGates, spec.Tasks[0].Gates, defs, c.integration, c.taskGates, c.defs)
			}
		})
	}
}
