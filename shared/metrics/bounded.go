package metrics

import "sync"

// MaxLabelValues caps the distinct values one bounded label (gate, pool,
// adapter, breaker scope) takes in a process; later values are reported
// as OtherLabel.
const MaxLabelValues = 200

// OtherLabel stands for the values of a bounded label past its cap.
const OtherLabel = "other"

var bounded = struct {
	mu   sync.Mutex
	seen map[string]map[string]struct{}
}{seen: map[string]map[string]struct{}{}}

// Bounded returns value as the value of label, or OtherLabel once label
// has taken MaxLabelValues other values in this process, so that no
// label's cardinality grows without bound. An empty value is "none".
func Bounded(label, value string) string {
	if value == "" {
		return "none"
	}
	bounded.mu.Lock()
	defer bounded.mu.Unlock()
	set := bounded.seen[label]
	if set == nil {
		set = map[string]struct{}{}
		bounded.seen[label] = set
	}
	if _, ok := set[value]; ok {
		return value
	}
	if len(set) >= MaxLabelValues {
		return OtherLabel
	}
	set[value] = struct{}{}
	return value
}
