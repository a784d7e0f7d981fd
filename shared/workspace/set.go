package workspace

import "sync"

// boundedSet is a set of strings that forgets everything once it holds
// max of them, so a long-lived process's memory does not grow with it.
type boundedSet struct {
	mu  sync.Mutex
	max int
	m   map[string]struct{}
}

func (b *boundedSet) has(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[s]
	return ok
}

func (b *boundedSet) remove(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, s)
}

func (b *boundedSet) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil || len(b.m) >= b.max {
		b.m = make(map[string]struct{})
	}
	b.m[s] = struct{}{}
}
