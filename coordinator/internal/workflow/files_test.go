package workflow

import (
	"reflect"
	"testing"
)

// A task's files, interface and may_change_interfaces (DAG-07, HIER-03):
// lists of repository-relative globs, a trailing slash meaning everything
// under the directory; may_change_interfaces also true or false.
func TestParseFiles(t *testing.T) {
	src := head + `tasks:
  - id: a
    prompt: p
    files: [src/auth/, "api/*.yaml"]
    interface: [api/openapi.yaml]
  - id: b
    prompt: p
    files: [src/**]
    may_change_interfaces: true
  - id: c
    prompt: p
    may_change_interfaces: [api/*.yaml]
  - id: d
    prompt: p
    may_change_interfaces: false
`
	spec, err := Parse("wf.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][3][]string{}
	for _, task := range spec.Tasks {
		got[task.ID] = [3][]string{task.Files, task.Interface(), task.MayChangeInterfaces()}
	}
	want := map[string][3][]string{
		"a": {{"src/auth/**", "api/*.yaml"}, {"api/openapi.yaml"}, nil},
		"b": {{"src/**"}, nil, {"**"}},
		"c": {nil, nil, {"api/*.yaml"}},
		"d": {nil, nil, nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestParseFilesProblems(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		wants []want
	}{
		{"not a list", head + "tasks:\n  - {id: a, prompt: p, files: src}\n",
			[]want{`4:31: task "a" files must be a list of paths or globs, got a string`}},
		{"absolute and escaping", head + "tasks:\n  - {id: a, prompt: p, interface: [/etc/x, ../y]}\n",
			[]want{`4:36: task "a" interface entry "/etc/x" must be relative to the repository root, not absolute`,
				`4:44: task "a" interface entry "../y" must stay inside the repository`}},
		{"human task", head + "tasks:\n  - {id: a, type: human, prompt: p, files: [x]}\n",
			[]want{`4:37: task "a" is a human task: it changes no files, so files does not apply`}},
		{"may_change_interfaces neither bool nor list", head + "tasks:\n  - {id: a, prompt: p, may_change_interfaces: {x: 1}}\n",
			[]want{`4:47: task "a" may_change_interfaces must be a list of paths or globs, got a mapping`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("wf.yaml", []byte(tc.src))
			checkProblems(t, "wf.yaml", tc.src, err, tc.wants)
		})
	}
}
