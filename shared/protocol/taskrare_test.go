package protocol

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// PERF-51: a task's rarely set settings live in TaskRare, which the task
// points at only when one is set; on the wire they stay the task's own
// fields, in both directions.
func TestTaskRareOnTheWire(t *testing.T) {
	tests := []struct {
		name string
		json string
		rare *TaskRare
	}{
		{"none set", `{"id":"a","prompt":"p","pool":"default","timeout_seconds":60}`, nil},
		{"some set", `{"id":"a","prompt":"p","pool":"default","timeout_seconds":60,"command":["x"],"adapter":"claude-code",` +
			`"retry_from":"base","approval":{"timeout_seconds":5},"interface":["api/*.go"],"may_change_interfaces":["**"],` +
			`"expand":{"prompt":"Build it."},"planner":"plan","max_cost_usd":1.5,"role":"implementer","feedback_template":"strict"}`,
			&TaskRare{Command: []string{"x"}, Adapter: "claude-code", RetryFrom: "base", Approval: &Approval{TimeoutSeconds: 5},
				Interface: []string{"api/*.go"}, MayChangeInterfaces: []string{"**"}, Expand: &ExpandSpec{Prompt: "Build it."},
				Planner: "plan", MaxCostUSD: 1.5, Role: "implementer", FeedbackTemplate: "strict"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var task TaskSpec
			if err := json.Unmarshal([]byte(tt.json), &task); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(task.TaskRare, tt.rare) {
				t.Fatalf("decoded rare settings %+v, want %+v", task.TaskRare, tt.rare)
			}
			back, err := json.Marshal(task)
			if err != nil {
				t.Fatal(err)
			}
			var a, b map[string]any
			if err := json.Unmarshal(back, &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tt.json), &b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("encoded %s, want the fields of %s", back, tt.json)
			}
			if strings.Contains(string(back), "TaskRare") {
				t.Fatalf("encoded %s names the Go field", back)
			}
		})
	}
}

// PERF-51: reading an unset rare setting gives its zero value; SetRare
// changes a copy (a task copied before keeps its settings) and drops the
// part once every setting is unset again.
func TestSetRare(t *testing.T) {
	var task TaskSpec
	if task.Planner() != "" || task.MaxCostUSD() != 0 || task.Approval() != nil || task.Interface() != nil {
		t.Fatal("unset rare settings are not zero")
	}
	task.SetRare(func(r *TaskRare) { r.Planner, r.MaxCostUSD = "plan", 2 })
	copied := task
	task.SetRare(func(r *TaskRare) { r.Planner = "other" })
	if task.Planner() != "other" || task.MaxCostUSD() != 2 {
		t.Fatalf("after SetRare: planner %q, max cost %v", task.Planner(), task.MaxCostUSD())
	}
	if copied.Planner() != "plan" {
		t.Fatalf("the copy's planner changed to %q", copied.Planner())
	}
	task.SetRare(func(r *TaskRare) { r.Planner, r.MaxCostUSD = "", 0 })
	if task.TaskRare != nil {
		t.Fatalf("all unset, the task still points at %+v", task.TaskRare)
	}
}
