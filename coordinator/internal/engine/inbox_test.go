package engine

import (
	"context"
	"slices"
	"sync"
	"testing"
)

type inboxKey struct{}

// PERF-46: reports that arrive for a workflow while its queue is busy are
// folded together, in arrival order, by one queued fold; a report arriving
// after that fold took the inbox gets a fold of its own; once the queue is
// closed nothing is kept.
func TestInboxFoldsWhatArrivedTogether(t *testing.T) {
	q, b := newSerial(), newInbox()
	var (
		mu    sync.Mutex
		folds [][]int
	)
	fold := func(wf string) {
		var got []int
		for _, p := range b.take(wf) {
			got = append(got, p.ctx.Value(inboxKey{}).(int))
		}
		mu.Lock()
		folds = append(folds, got)
		mu.Unlock()
	}
	report := func(i int) inboxReport {
		return inboxReport{ctx: context.WithValue(context.Background(), inboxKey{}, i)}
	}

	release := make(chan struct{})
	q.Go("wf-a", func() { <-release }) // the workflow's queue is busy
	for i := 1; i <= 5; i++ {
		if !b.put("wf-a", report(i), q, fold) {
			t.Fatalf("put %d refused with the queue open", i)
		}
	}
	if !b.put("wf-b", report(9), q, fold) {
		t.Fatal("put to another workflow refused")
	}
	close(release)
	done := make(chan struct{})
	q.Go("wf-a", func() { close(done) })
	<-done
	if !b.put("wf-a", report(6), q, fold) {
		t.Fatal("put after the fold refused")
	}
	q.Close()

	slices.SortFunc(folds, func(x, y []int) int { return x[0] - y[0] })
	want := [][]int{{1, 2, 3, 4, 5}, {6}, {9}}
	if !slices.EqualFunc(folds, want, slices.Equal[[]int]) {
		t.Fatalf("folds %v, want %v", folds, want)
	}
	if b.put("wf-a", report(7), q, fold) {
		t.Fatal("put after the queue closed accepted")
	}
	if left := b.take("wf-a"); len(left) != 0 {
		t.Fatalf("a refused report was kept: %d", len(left))
	}
}
