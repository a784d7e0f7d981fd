package pathglob

import (
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
)

// maxOverlapStates bounds the pairs of states Overlap explores; past it,
// it answers true (it may overlap), never false.
const maxOverlapStates = 1 << 16

// Overlap reports whether some path may match both patterns, and if it
// finds one, an example (which matches both but for Normalize: an example
// may hold a repeated slash). It is conservative: it never answers false
// for two patterns that a common path matches; for patterns whose
// languages it cannot compare in its budget it answers true with no
// example. Two globs are compared as the regular languages they translate
// to (the product of their automata), so the answer is exact otherwise:
// "src/*.go" and "src/a*" overlap (src/a.go), "src/*.go" and "docs/**"
// do not.
func Overlap(a, b string) (example string, ok bool) {
	return Compile(a).Overlap(Compile(b))
}

// Overlap reports whether some path may match both p and q (see the
// function Overlap).
func (p *Pattern) Overlap(q *Pattern) (string, bool) {
	// Every path either matches starts with its literal prefix: prefixes
	// neither of which begins the other rule a common path out, cheaply.
	if a, b := p.prefix(), q.prefix(); !strings.HasPrefix(a, b) && !strings.HasPrefix(b, a) {
		return "", false
	}
	switch {
	case p.re == nil && q.re == nil:
		return p.lit, p.lit == q.lit
	case p.re == nil:
		return p.lit, q.Match(p.lit)
	case q.re == nil:
		return q.lit, p.Match(q.lit)
	}
	pa, errA := program(p.re.String())
	pb, errB := program(q.re.String())
	if errA != nil || errB != nil {
		return "", true // cannot tell: assume they overlap
	}
	return intersect(pa, pb)
}

// prefix is the pattern's text before its first wildcard or class: the
// start of every path it matches.
func (p *Pattern) prefix() string {
	src := p.lit
	if p.re != nil {
		src = p.src
	}
	if i := strings.IndexAny(src, "*?["); i >= 0 {
		return src[:i]
	}
	return src
}

func program(expr string) (*syntax.Prog, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, err
	}
	return syntax.Compile(re.Simplify())
}

// pair is a state of the product automaton: an instruction of each
// program that consumes a rune (or matches).
type pair struct{ a, b uint32 }

// intersect searches the product of two programs breadth first for a
// state where both match, and returns the runes read on the way there.
func intersect(pa, pb *syntax.Prog) (string, bool) {
	type visit struct {
		from pair
		r    rune
		root bool
		// loose: a rune on the way may not match both (ranges widened a
		// case-folding instruction), so the path is no example.
		loose bool
	}
	seen := map[pair]visit{}
	var queue []pair
	push := func(s pair, v visit) {
		if _, ok := seen[s]; !ok {
			seen[s] = v
			queue = append(queue, s)
		}
	}
	for _, a := range closure(pa, uint32(pa.Start)) {
		for _, b := range closure(pb, uint32(pb.Start)) {
			push(pair{a, b}, visit{root: true})
		}
	}
	for len(queue) > 0 {
		if len(seen) > maxOverlapStates {
			return "", true
		}
		s := queue[0]
		queue = queue[1:]
		ia, ib := &pa.Inst[s.a], &pb.Inst[s.b]
		if ia.Op == syntax.InstMatch && ib.Op == syntax.InstMatch {
			if seen[s].loose {
				return "", true // overlapping, as far as the search can tell
			}
			var rs []rune
			for cur := s; !seen[cur].root; cur = seen[cur].from {
				rs = append(rs, seen[cur].r)
			}
			for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
				rs[i], rs[j] = rs[j], rs[i]
			}
			return string(rs), true
		}
		if ia.Op == syntax.InstMatch || ib.Op == syntax.InstMatch {
			continue
		}
		r, ok := common(ranges(ia), ranges(ib))
		if !ok {
			continue
		}
		loose := seen[s].loose || !reads(ia, r) || !reads(ib, r)
		for _, a := range closure(pa, ia.Out) {
			for _, b := range closure(pb, ib.Out) {
				push(pair{a, b}, visit{from: s, r: r, loose: loose})
			}
		}
	}
	return "", false
}

// closure returns the instructions reachable from pc without reading a
// rune that read one or match. Empty-width assertions are passed as if
// they held, which can only add paths (the patterns have none but the
// anchors, which the search's start and end stand for).
func closure(p *syntax.Prog, pc uint32) []uint32 {
	var out []uint32
	seen := map[uint32]bool{}
	stack := []uint32{pc}
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pc] {
			continue
		}
		seen[pc] = true
		i := &p.Inst[pc]
		switch i.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			stack = append(stack, i.Out, i.Arg)
		case syntax.InstCapture, syntax.InstNop, syntax.InstEmptyWidth:
			stack = append(stack, i.Out)
		case syntax.InstFail:
		default:
			out = append(out, pc)
		}
	}
	return out
}

// reads reports whether a rune-reading instruction reads r.
func reads(i *syntax.Inst, r rune) bool {
	switch i.Op {
	case syntax.InstRune:
		return i.MatchRune(r)
	case syntax.InstRune1:
		return r == i.Rune[0]
	case syntax.InstRuneAnyNotNL:
		return r != '\n'
	}
	return true
}

// maxFoldRunes bounds the runes of a case-folding instruction that ranges
// lists one by one.
const maxFoldRunes = 256

// ranges returns the runes an instruction reads as sorted, inclusive
// [lo, hi] pairs; a case-folding instruction counts as any rune unless it
// reads few enough runes to list (a glob's class "[Xx]" compiles to one).
func ranges(i *syntax.Inst) []rune {
	switch i.Op {
	case syntax.InstRune1:
		return []rune{i.Rune[0], i.Rune[0]}
	case syntax.InstRune:
		if syntax.Flags(i.Arg)&syntax.FoldCase != 0 {
			return foldRanges(i.Rune)
		}
		if len(i.Rune) == 1 {
			return []rune{i.Rune[0], i.Rune[0]}
		}
		return i.Rune
	case syntax.InstRuneAnyNotNL:
		return []rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}
	}
	return []rune{0, unicode.MaxRune}
}

// foldRanges lists the runes of ranges rs and their case folds as
// one-rune ranges, sorted, or any rune when there are too many.
func foldRanges(rs []rune) []rune {
	if len(rs) == 1 {
		rs = []rune{rs[0], rs[0]}
	}
	n := 0
	for k := 0; k+1 < len(rs); k += 2 {
		n += int(rs[k+1]-rs[k]) + 1
	}
	if n > maxFoldRunes {
		return []rune{0, unicode.MaxRune}
	}
	set := map[rune]bool{}
	for k := 0; k+1 < len(rs); k += 2 {
		for r := rs[k]; r <= rs[k+1]; r++ {
			set[r] = true
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				set[f] = true
			}
		}
	}
	out := make([]rune, 0, 2*len(set))
	for r := range set {
		out = append(out, r)
	}
	slices.Sort(out)
	pairs := make([]rune, 0, 2*len(out))
	for _, r := range out {
		pairs = append(pairs, r, r)
	}
	return pairs
}

// common returns a rune in both range lists: a lowercase letter when one
// is (examples read better), otherwise the lowest.
func common(a, b []rune) (rune, bool) {
	found, best := false, rune(0)
	for i := 0; i+1 < len(a); i += 2 {
		for j := 0; j+1 < len(b); j += 2 {
			lo, hi := max(a[i], b[j]), min(a[i+1], b[j+1])
			if lo > hi {
				continue
			}
			if l, h := max(lo, 'a'), min(hi, 'z'); l <= h {
				return l, true
			}
			if !found || lo < best {
				found, best = true, lo
			}
		}
	}
	return best, found
}
