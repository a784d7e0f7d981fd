package dashboard

import (
	"regexp"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
)

// Nodes are layered by dependency depth; each dependency is one edge
// classed by the dependency's status; an edge skipping a column arcs from
// the boxes' tops; text is escaped.
func TestRenderDAG(t *testing.T) {
	nodes := []api.NodeSummary{
		{ID: "a", Status: "succeeded"},
		{ID: "b", Status: "running", DependsOn: []string{"a"}},
		{ID: "c", Status: "pending", DependsOn: []string{"a", "b", "gone"}},
		{ID: "d", Status: "pending"},
	}
	depth := layers(nodes)
	for id, want := range map[string]int{"a": 0, "b": 1, "c": 2, "d": 0} {
		if depth[id] != want {
			t.Errorf("depth of %s = %d, want %d", id, depth[id], want)
		}
	}
	svg := string(renderDAG("wf-1", nodes))
	for _, want := range []string{
		`<a href="/workflows/wf-1/nodes/c" class="dag-node" data-node="c" data-status="pending">`,
		`class="edge dep-succeeded" data-from="a" data-to="b"`,
		`class="edge dep-running" data-from="b" data-to="c"`,
		`<rect class="st-running"`,
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG lacks %s:\n%s", want, svg)
		}
	}
	if n := strings.Count(svg, `<path class="edge`); n != 3 {
		t.Errorf("%d edges, want 3 (a missing dependency draws none)", n)
	}
	// a (column 0) to c (column 2): from a's top right to c's top left.
	skip := regexp.MustCompile(`data-from="a" data-to="c" d="M(\d+),(\d+) `).FindStringSubmatch(svg)
	if skip == nil || skip[1] != "168" || skip[2] != "30" {
		t.Errorf("the skipping edge starts at %v, want a's top (168,30)", skip)
	}
	if out := string(renderDAG(`w"<x>`, []api.NodeSummary{{ID: `<b>`, Status: "pending"}})); strings.Contains(out, "<b>") || strings.Contains(out, `w"<x>`) {
		t.Errorf("names are not escaped:\n%s", out)
	}
}
