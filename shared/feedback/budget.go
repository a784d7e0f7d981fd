package feedback

import (
	"encoding/json"
)

// Budget fitting: what each stage cuts down to.
const (
	tailFloor      = 1024 // a gate's two tails together, before tails go entirely
	shortTestMsg   = 200
	shortError     = 200
	shortViolation = 5 // paths kept
	shortFix       = 120
)

// fitter measures the document as it is cut. The encoded document is the
// encoding without gates, whose "gates":[] then holds each gate's encoding
// separated by commas, so a change to one gate re-encodes that gate only.
type fitter struct {
	f      *Feedback
	work   []*gateWork
	budget int
	base   int   // len(json.Marshal(f)) with no gates
	sizes  []int // len(json.Marshal(work[i].g))
}

func size(v any) int {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen: strings, numbers and booleans only
		panic("feedback: " + err.Error())
	}
	return len(b)
}

// measure re-encodes everything but the gates.
func (ft *fitter) measure() {
	gates := ft.f.Gates
	ft.f.Gates = []Gate{}
	ft.base = size(ft.f)
	ft.f.Gates = gates
}

// resize re-encodes gate i after a change.
func (ft *fitter) resize(i int) { ft.sizes[i] = size(ft.work[i].g) }

// over is how many bytes the document is over the budget (<= 0: it fits).
func (ft *fitter) over() int {
	n := ft.base
	for _, s := range ft.sizes[:len(ft.work)] {
		n += s
	}
	if len(ft.work) > 1 {
		n += len(ft.work) - 1
	}
	return n - ft.budget
}

// fit cuts f until json.Marshal(f) is at most budget bytes, in the order
// Build documents, and sets f.Gates from work.
func fit(f *Feedback, work []*gateWork, budget int) {
	ft := &fitter{f: f, work: work, budget: budget, sizes: make([]int, len(work))}
	// The initial caps (maxTail, maxTests…) count as trimming too.
	for i, w := range work {
		if w.outN < len(w.out) || w.errN < len(w.err) || w.g.TestsOmitted > 0 || w.g.ViolationsOmitted > 0 {
			f.Truncated = true
		}
		ft.resize(i)
	}
	if ft.overAfterMeasure() > 0 && !f.Truncated {
		f.Truncated = true
		ft.measure()
	}
	ft.cut()
	f.Gates = make([]Gate, len(ft.work))
	for i, w := range ft.work {
		f.Gates[i] = w.g
	}
}

// overAfterMeasure measures the parts outside the gates, then returns over.
func (ft *fitter) overAfterMeasure() int {
	ft.measure()
	return ft.over()
}

// cut applies the stages in turn until the document fits.
func (ft *fitter) cut() {
	f, work := ft.f, ft.work
	if ft.over() <= 0 {
		return
	}
	// Tails, least important gate first: down to tailFloor, then to nothing.
	for _, floor := range []int{tailFloor, 0} {
		for i := len(work) - 1; i >= 0; i-- {
			// Cutting a marker's worth more than the excess settles it in one
			// or two passes, a marker being added on the first cut.
			for n := ft.over(); n > 0; n = ft.over() {
				if !work[i].shrinkTails(n+2*len(TrimMarker), floor) {
					break
				}
				ft.resize(i)
			}
		}
	}
	// Tests: shorter messages, then fewer tests from the end of each list.
	for i := len(work) - 1; i >= 0 && ft.over() > 0; i-- {
		g := &work[i].g
		for j := range g.Tests {
			g.Tests[j].Message = keepHead(g.Tests[j].Message, shortTestMsg)
		}
		ft.resize(i)
	}
	for i := len(work) - 1; i >= 0 && ft.over() > 0; i-- {
		g := &work[i].g
		all, omitted := g.Tests, g.TestsOmitted
		fits := func(k int) bool {
			g.Tests, g.TestsOmitted = all[:k], omitted+len(all)-k
			ft.resize(i)
			return ft.over() <= 0
		}
		fits(keepMost(len(all), fits))
	}
	// Review issues, from the end of each review gate's list (the least
	// severe), then its suggestions and concerns.
	for i := len(work) - 1; i >= 0 && ft.over() > 0; i-- {
		r := work[i].g.Review
		if r == nil {
			continue
		}
		all, omitted := r.Issues, r.IssuesOmitted
		fits := func(k int) bool {
			r.Issues, r.IssuesOmitted = all[:k], omitted+len(all)-k
			ft.resize(i)
			return ft.over() <= 0
		}
		if !fits(keepMost(len(all), fits)) {
			r.Suggestions, r.SecurityConcerns = nil, nil
			ft.resize(i)
		}
	}
	// Errors and violation lists.
	for i := len(work) - 1; i >= 0 && ft.over() > 0; i-- {
		g := &work[i].g
		g.Error = keepHead(g.Error, shortError)
		if len(g.Violations) > shortViolation {
			g.ViolationsOmitted += len(g.Violations) - shortViolation
			g.Violations = g.Violations[:shortViolation]
		}
		ft.resize(i)
	}
	// Priority fixes: shorter, then fewer, keeping the first.
	if ft.over() > 0 {
		for j := range f.PriorityFixes {
			f.PriorityFixes[j] = keepHead(f.PriorityFixes[j], shortFix)
		}
		ft.measure()
	}
	if fixes := f.PriorityFixes; len(fixes) > 1 && ft.over() > 0 {
		fits := func(k int) bool { f.PriorityFixes = fixes[:max(k, 1)]; return ft.overAfterMeasure() <= 0 }
		fits(keepMost(len(fixes), fits))
	}
	// Whole gates, from the end.
	if n := len(work); n > 0 && ft.over() > 0 {
		fits := func(k int) bool {
			ft.work, f.OmittedGates = work[:k], n-k
			return ft.overAfterMeasure() <= 0
		}
		fits(keepMost(n, fits))
	}
	// The operator's note, then the last priority fix.
	if f.Note != nil {
		for n := ft.over(); n > 0 && f.Note.Text != ""; n = ft.overAfterMeasure() {
			f.Note.Text = keepHead(f.Note.Text, len(f.Note.Text)-n-len("…"))
		}
	}
	if ft.over() > 0 {
		f.PriorityFixes = []string{}
		ft.measure()
	}
}

// shrinkTails cuts need bytes from the gate's two tails, taking from the
// longer one first, without going below floor bytes for both together.
// It reports whether anything was cut.
func (w *gateWork) shrinkTails(need, floor int) bool {
	total := w.outN + w.errN
	target := max(floor, total-need)
	if target >= total {
		if floor == 0 && total == 0 && (w.g.StdoutTail != "" || w.g.StderrTail != "") {
			// Nothing kept but the markers: drop them too.
			w.out, w.err = "", ""
			w.apply()
			return true
		}
		return false
	}
	half := target / 2
	switch {
	case w.outN <= half:
		w.errN = target - w.outN
	case w.errN <= half:
		w.outN = target - w.errN
	default:
		w.outN, w.errN = half, target-half
	}
	w.apply()
	return true
}

// keepMost returns the largest k in [0, n) for which fits(k) holds, or 0
// when none does; fits must hold for every k below one for which it holds
// (keeping fewer items never makes the document larger). It is called with
// n known not to fit.
func keepMost(n int, fits func(int) bool) int {
	lo, hi := 0, n // fits(hi) is false; the answer is in [lo, hi)
	for lo+1 < hi {
		mid := (lo + hi) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
