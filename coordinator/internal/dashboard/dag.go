package dashboard

import (
	"fmt"
	"html"
	"html/template"
	"net/url"
	"strings"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
)

// The DAG's geometry, in SVG user units.
const (
	dagNodeW   = 180
	dagNodeH   = 48
	dagColGap  = 64
	dagRowGap  = 18
	dagPadding = 12
	// dagTop is the room above the first row, where edges that skip
	// columns arc.
	dagTop = 30
)

// layers places each node in a column by its dependency depth: 0 for a
// node with no dependencies, else one more than its deepest dependency's.
// Dependencies outside the list are ignored; a cycle (which validation
// rules out) is cut where it closes.
func layers(nodes []api.NodeSummary) map[string]int {
	byID := map[string]api.NodeSummary{}
	for _, n := range nodes {
		byID[n.ID] = n
	}
	depth := map[string]int{}
	visiting := map[string]bool{}
	var walk func(id string) int
	walk = func(id string) int {
		if d, ok := depth[id]; ok {
			return d
		}
		if visiting[id] {
			return 0
		}
		visiting[id] = true
		d := 0
		for _, dep := range byID[id].DependsOn {
			if _, ok := byID[dep]; ok {
				d = max(d, walk(dep)+1)
			}
		}
		visiting[id] = false
		depth[id] = d
		return d
	}
	for _, n := range nodes {
		walk(n.ID)
	}
	return depth
}

// renderDAG draws a workflow's nodes as an SVG: columns by dependency
// depth, each node a box coloured by its status (class st-STATUS) linking
// to its page, each dependency an arrow from the dependency to the node,
// solid once the dependency succeeded (class dep-STATUS).
func renderDAG(wf string, nodes []api.NodeSummary) template.HTML {
	if len(nodes) == 0 {
		return ""
	}
	depth := layers(nodes)
	type pos struct{ x, y int }
	at := map[string]pos{}
	rows := map[int]int{}
	status := map[string]string{}
	cols, maxRows := 0, 0
	for _, n := range nodes {
		d := depth[n.ID]
		at[n.ID] = pos{dagPadding + d*(dagNodeW+dagColGap), dagTop + rows[d]*(dagNodeH+dagRowGap)}
		rows[d]++
		cols = max(cols, d+1)
		maxRows = max(maxRows, rows[d])
		status[n.ID] = string(n.Status)
	}
	w := 2*dagPadding + cols*dagNodeW + (cols-1)*dagColGap
	h := dagTop + dagPadding + maxRows*dagNodeH + (maxRows-1)*dagRowGap
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="dag" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="workflow DAG" width="%d" height="%d" viewBox="0 0 %d %d">`, w, h, w, h)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>`)
	for _, n := range nodes {
		to := at[n.ID]
		for _, dep := range n.DependsOn {
			from, ok := at[dep]
			if !ok {
				continue
			}
			x1, y1 := from.x+dagNodeW, from.y+dagNodeH/2
			x2, y2 := to.x-2, to.y+dagNodeH/2
			c1x, c1y, c2x, c2y := (x1+x2)/2, y1, (x1+x2)/2, y2
			if depth[n.ID]-depth[dep] > 1 {
				// An edge that skips columns leaves and enters the boxes
				// by their tops and arcs over the boxes between.
				x1, y1, x2, y2 = from.x+dagNodeW-24, from.y, to.x+24, to.y-2
				c1x, c1y, c2x, c2y = x1+dagColGap, y1-dagTop, x2-dagColGap, y2-dagTop
			}
			fmt.Fprintf(&b, `<path class="edge dep-%s" data-from="%s" data-to="%s" d="M%d,%d C%d,%d %d,%d %d,%d" marker-end="url(#arrow)"/>`,
				esc(status[dep]), esc(dep), esc(n.ID), x1, y1, c1x, c1y, c2x, c2y, x2, y2)
		}
	}
	for _, n := range nodes {
		p := at[n.ID]
		href := "/workflows/" + url.PathEscape(wf) + "/nodes/" + url.PathEscape(n.ID)
		label := string(n.Status)
		if n.Attempt > 0 {
			if n.MaxAttempts > 0 {
				label += fmt.Sprintf(" · %d/%d", n.Attempt, n.MaxAttempts)
			} else {
				label += fmt.Sprintf(" · #%d", n.Attempt)
			}
		}
		fmt.Fprintf(&b, `<a href="%s" class="dag-node" data-node="%s" data-status="%s"><title>%s: %s</title>`, esc(href), esc(n.ID), esc(string(n.Status)), esc(n.ID), esc(string(n.Status)))
		fmt.Fprintf(&b, `<rect class="st-%s" x="%d" y="%d" width="%d" height="%d" rx="7"/>`, esc(string(n.Status)), p.x, p.y, dagNodeW, dagNodeH)
		fmt.Fprintf(&b, `<text class="node-id" x="%d" y="%d">%s</text>`, p.x+10, p.y+20, esc(short(22, n.ID)))
		fmt.Fprintf(&b, `<text class="node-status" x="%d" y="%d">%s</text></a>`, p.x+10, p.y+38, esc(label))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every value above is escaped with esc
}

func esc(s string) string { return html.EscapeString(s) }
