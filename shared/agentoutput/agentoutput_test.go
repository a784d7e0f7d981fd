package agentoutput

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestExtract(t *testing.T) {
	tests := []struct {
		name, text, want string
		err              error
	}{
		{"fenced", "Done.\n```json\n{\"a\": 1}\n```\n", `{"a":1}`, nil},
		{"last fence wins", "```json\n{\"a\":1}\n```\nthen\n```json\n{\"a\":2}\n```", `{"a":2}`, nil},
		{"fence wins over a later bare object", "```json\n{\"a\":1}\n```\nlike {\"a\":2}", `{"a":1}`, nil},
		{"JSON label any case, info words", "```JSON title\n{\"a\":1}\n```", `{"a":1}`, nil},
		{"unlabelled fence holding an object", "```\n{\"a\":1}\n```", `{"a":1}`, nil},
		{"unlabelled fence not holding an object is ignored", "```\nls -l\n```\n{\"b\":2}", `{"b":2}`, nil},
		{"other language fence ignored, its closing fence not an opening", "```go\nx := map[string]int{}\n```\n```json\n{\"c\":3}\n```", `{"c":3}`, nil},
		{"tilde fence, longer closing", "~~~json\n{\"a\":1}\n~~~~\n", `{"a":1}`, nil},
		{"fence inside a longer fence is content", "````markdown\n```json\n{\"x\":1}\n```\n````\n{\"y\":2}", `{"y":2}`, nil},
		{"unclosed fence runs to the end", "```json\n{\"a\":1}\n", `{"a":1}`, nil},
		{"bare object, last wins", `first {"a":1} then {"a":2} end`, `{"a":2}`, nil},
		{"bare object with braces in strings", `result: {"msg": "use } and { freely", "n": [1]}`, `{"msg":"use } and { freely","n":[1]}`, nil},
		{"bare: invalid later object skipped", `{"a":1} and {not json}`, `{"a":1}`, nil},
		{"bare: nested object is not top-level", `{outer {"a":1} }`, "", ErrNoBlock},
		{"empty", "", "", ErrNoBlock},
		{"prose only", "All done, no JSON here.", "", ErrNoBlock},
		{"marker is no block (OUT-01)", "STATUS: SUCCESS", "", ErrNoBlock},
		{"malformed fenced block", "```json\n{\"a\": }\n```", "", ErrInvalid},
		{"empty json fence ignored", "```json\n```\n", "", ErrNoBlock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Extract(tt.text)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Extract error = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("Extract = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestExamplesValid(t *testing.T) {
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			text := "Here is my result.\n" + Instructions(name)
			// The instructions end with the example: it is their last block.
			out, err := Parse(name, text)
			if err != nil {
				t.Fatalf("the example of %s does not parse: %v", name, err)
			}
			if out.Schema != name || out.Status() == "" {
				t.Fatalf("output %+v", out)
			}
			if !strings.Contains(Instructions(name), `"$id"`) {
				t.Fatal("instructions do not quote the schema")
			}
		})
	}
	if Instructions("nope") != "" || Instructions("") != "" {
		t.Fatal("instructions for an unknown schema")
	}
}

func TestValidateViolations(t *testing.T) {
	tests := []struct {
		schema, block string
		want          []string // "path: substring of message"
	}{
		{Generic, `{"status":"DONE","action_taken":""}`, []string{"/action_taken: ", "/status: "}},
		{Generic, `{"status":"BLOCKED","action_taken":"x"}`, []string{": missing property 'blockers'"}},
		{Generic, `{"status":"SUCCESS","action_taken":"x","extra":1}`, []string{": additional properties 'extra'"}},
		{Implementation, `{"status":"SUCCESS","files_created":[],"files_modified":[]}`, []string{": missing property 'tests_written'"}},
		{Review, `{"status":"REJECTED","issues":[],"suggestions":[]}`, []string{"/issues: minItems"}},
		{Review, `{"status":"APPROVED","issues":[{"severity":"bad","description":"d","line":0}],"suggestions":[]}`,
			[]string{"/issues/0/line: ", "/issues/0/severity: "}},
		{Plan, `{"status":"COMPLETE","phases":[],"estimated_components":1}`, []string{"/phases: minItems"}},
		{Plan, `{"status":"COMPLETE","phases":[{"id":"p","components":[{"id":"Bad Id","description":"x"}]}],"estimated_components":1}`,
			[]string{"/phases/0/components/0/id: "}},
		{Plan, `[1]`, []string{": got array, want object"}},
		{Plan, `{"status":`, []string{": not valid JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.schema+" "+tt.block, func(t *testing.T) {
			err := Validate(tt.schema, []byte(tt.block))
			var ie *InvalidError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) || errors.Is(err, ErrNoBlock) {
				t.Fatalf("Validate = %v, want an *InvalidError", err)
			}
			got := make([]string, 0, len(ie.Violations))
			for _, v := range ie.Violations {
				got = append(got, v.Path+": "+v.Message)
			}
			for _, w := range tt.want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("no violation like %q in %q", w, got)
				}
			}
			if ie.Schema != tt.schema || !strings.Contains(ie.Error(), "schema "+tt.schema) {
				t.Errorf("error %q", ie.Error())
			}
		})
	}
	if err := Validate("nope", []byte(`{}`)); err == nil || errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown schema: %v", err)
	}
}

func TestPlanChecks(t *testing.T) {
	comp := func(id string, deps ...string) map[string]any {
		c := map[string]any{"id": id, "description": "build " + id}
		if len(deps) > 0 {
			c["depends_on"] = deps
		}
		return c
	}
	plan := func(phases ...[]map[string]any) string {
		var ps []map[string]any
		for i, cs := range phases {
			ps = append(ps, map[string]any{"id": string(rune('a' + i)), "components": cs})
		}
		data, _ := json.Marshal(map[string]any{"status": "COMPLETE", "phases": ps, "estimated_components": 2})
		return string(data)
	}
	tests := []struct {
		name, block, want string
	}{
		{"unknown dependency", plan([]map[string]any{comp("x", "y")}), `/phases/0/components/0/depends_on/0: component "x" depends on "y"`},
		{"self dependency", plan([]map[string]any{comp("x", "x")}), "depends on itself"},
		{"duplicate id", plan([]map[string]any{comp("x"), comp("x")}), `/phases/0/components/1/id: component id "x" is also used at /phases/0/components/0`},
		{"cycle", plan([]map[string]any{comp("x", "y"), comp("y", "x")}), "cycle (phase order included): x -> y -> x"},
		{"cycle through phase order", plan([]map[string]any{comp("x", "y")}, []map[string]any{comp("y")}), "x -> y -> x"},
		{"absolute file", plan([]map[string]any{{"id": "x", "description": "d", "files": []string{"src/", "/etc/passwd"}}}),
			`/phases/0/components/0/files/1: "/etc/passwd" must be relative to the repository root`},
		{"file outside", plan([]map[string]any{{"id": "x", "description": "d", "files": []string{"a/../../b"}}}),
			`'..' is not allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(Plan, []byte(tt.block))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode = %v, want a violation with %q", err, tt.want)
			}
		})
	}
	out, err := Decode(Plan, []byte(plan([]map[string]any{comp("x"), comp("y", "x")}, []map[string]any{comp("z")})))
	if err != nil {
		t.Fatal(err)
	}
	ids, deps := out.Plan.Graph()
	if strings.Join(ids, ",") != "x,y,z" || strings.Join(deps["y"], ",") != "x" || strings.Join(deps["z"], ",") != "x,y" || deps["x"] != nil {
		t.Fatalf("graph %v %v", ids, deps)
	}
}

func TestParseErrors(t *testing.T) {
	_, err := Parse(Review, "LGTM")
	if !errors.Is(err, ErrNoBlock) || errors.Is(err, ErrInvalid) {
		t.Fatalf("no block: %v", err)
	}
	_, err = Parse(Review, "```json\n{oops\n```")
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.Schema != Review {
		t.Fatalf("malformed: %v", err)
	}
	out, err := Parse(Review, "ok\n```json\n"+string(Example(Review))+"\n```")
	if err != nil || out.Review == nil || out.Review.Issues[0].Line != 42 || out.Status() != VerdictChangesRequested {
		t.Fatalf("review: %+v %v", out, err)
	}
	out, err = Parse(Generic, "```json\n{\"status\":\"BLOCKED\",\"action_taken\":\"none\",\"blockers\":[\"no credentials\"]}\n```")
	if err != nil || out.Status() != StatusBlocked || out.Blockers()[0] != "no credentials" {
		t.Fatalf("blocked: %+v %v", out, err)
	}
}

func TestViolationsCapped(t *testing.T) {
	var issues []string
	for range MaxViolations + 5 {
		issues = append(issues, `{"severity":"x","description":"d"}`)
	}
	block := `{"status":"REJECTED","suggestions":[],"issues":[` + strings.Join(issues, ",") + `]}`
	var ie *InvalidError
	if err := Validate(Review, []byte(block)); !errors.As(err, &ie) || len(ie.Violations) != MaxViolations || ie.Omitted != 5 {
		t.Fatalf("violations: %v", err)
	}
	if !strings.Contains(ie.Error(), "(and 5 more)") {
		t.Fatal(ie.Error())
	}
}
