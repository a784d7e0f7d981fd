package workflow

import (
	"testing"
)

// TestParseMerge reads auto_merge and merge_into, validating the branch
// name as git would, and still rejects unknown fields (GIT-03, S-2.10).
func TestParseMerge(t *testing.T) {
	t.Parallel()
	const tasks = "tasks: [{id: a, prompt: p}]\n"
	valid := []struct {
		name, src string
		auto      bool
		into      string
	}{
		{"absent", head + tasks, false, ""},
		{"auto merge into the submitted branch", head + "auto_merge: true\n" + tasks, true, ""},
		{"auto merge into a named branch", head + "auto_merge: true\nmerge_into: release/1.2\n" + tasks, true, "release/1.2"},
		{"merge_into alone is the default for coordinator merge", head + "merge_into: main\n" + tasks, false, "main"},
		{"null values count as absent", head + "auto_merge:\nmerge_into:\n" + tasks, false, ""},
	}
	for _, tc := range valid {
		spec, err := Parse("wf.yaml", []byte(tc.src))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if spec.AutoMerge != tc.auto || spec.MergeInto != tc.into {
			t.Errorf("%s: auto_merge %v, merge_into %q; want %v, %q", tc.name, spec.AutoMerge, spec.MergeInto, tc.auto, tc.into)
		}
	}
	invalid := []struct {
		name, src string
		wants     []want
	}{
		{"auto_merge is a boolean", head + "auto_merge: yes please\n" + tasks,
			[]want{"3:13: auto_merge must be true or false"}},
		{"merge_into is a string", head + "merge_into: [main]\n" + tasks,
			[]want{"3:13: merge_into must be a string"}},
		{"merge_into is a branch name", head + "merge_into: \"bad..name\"\n" + tasks,
			[]want{`3:13: merge_into: invalid branch name "bad..name": contains ".."`}},
		{"merge_into is not HEAD", head + "merge_into: HEAD\n" + tasks,
			[]want{`3:13: merge_into: invalid branch name "HEAD": reserved by git`}},
		{"unknown fields still rejected", head + "auto_merged: true\n" + tasks,
			[]want{`3:1: unknown field "auto_merged" in workflow; did you mean "auto_merge"?`}},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("wf.yaml", []byte(tc.src))
			checkProblems(t, "wf.yaml", tc.src, err, tc.wants)
		})
	}
}
