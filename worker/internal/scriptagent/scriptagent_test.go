package scriptagent

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestExecuteReportsChanges checks what the CLI stand-ins build their tool
// events from: the files changed, in order, what the directives printed,
// and how the script ended.
func TestExecuteReportsChanges(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("SUPERVISOR_FEEDBACK_FILE", "")
	var out strings.Builder
	res := Execute("@write a.txt\n1\n@end\n@print hi\n@append a.txt\n2\n@end\n@write b.txt\n3\n@end\n@delete b.txt\n", &out)
	want := []Change{{"write", "a.txt"}, {"append", "a.txt"}, {"write", "b.txt"}, {"delete", "b.txt"}}
	if !slices.Equal(res.Changes, want) || res.Code != 0 || res.APIError || out.String() != "hi\n" {
		t.Errorf("result = %+v, printed %q", res, out.String())
	}
	if res.Summary != "done: write a.txt, append a.txt, write b.txt, delete b.txt" {
		t.Errorf("summary = %q", res.Summary)
	}
	res = Execute("@write c.txt\nx\n@end\n@api-error API Error: 529 overloaded\n@write d.txt\ny\n@end\n", &out)
	if !res.APIError || res.Code != 1 || res.Summary != "API Error: 529 overloaded" || len(res.Changes) != 1 {
		t.Errorf("api error result = %+v", res)
	}
}

// @signal and @await meet through files outside the workspace.
func TestSignalAwait(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	if res := Execute("@signal "+dir+"/a\n@await "+dir+"/a\n", &out); res.Code != 0 {
		t.Fatalf("signal then await: %+v", res)
	}
	if err := await(dir+"/never", 100*time.Millisecond); err == nil {
		t.Fatal("await of a file nobody makes succeeded")
	}
}

// @reply makes the final message; @if-file and @if-no-file read the code,
// as a reviewer does: the same script requests changes, then approves
// once the file holds the fix.
func TestReplyAndIfFile(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("SUPERVISOR_FEEDBACK_FILE", "")
	script := "@if-no-file a.go fixed\n@reply\nCHANGES\n```json\n{}\n```\n@end\n@endif\n" +
		"@if-file a.go fixed\n@reply\nAPPROVED\n@end\n@endif\n"
	var out strings.Builder
	if res := Execute(script, &out); res.Summary != "CHANGES\n```json\n{}\n```" || res.Code != 0 {
		t.Errorf("without the file: %+v", res)
	}
	Execute("@write a.go\nbroken\n@end\n", &out)
	if res := Execute(script, &out); !strings.HasPrefix(res.Summary, "CHANGES") {
		t.Errorf("without the fix: %+v", res)
	}
	Execute("@write a.go\nfixed\n@end\n", &out)
	if res := Execute(script, &out); res.Summary != "APPROVED" {
		t.Errorf("with the fix: %+v", res)
	}
	if res := Execute("@if-file ../x y\n@reply\nno\n@end\n@endif\n@print z\n", &out); res.Summary != "nothing to do" {
		t.Errorf("a path outside: %+v", res)
	}
}

// @if-env runs its directives only when the variable has the value.
func TestIfEnv(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("SUPERVISOR_FEEDBACK_FILE", "")
	t.Setenv("SUPERVISOR_REVIEWER", "2")
	var out strings.Builder
	res := Execute("@if-env SUPERVISOR_REVIEWER 1\n@reply\none\n@end\n@endif\n@if-env SUPERVISOR_REVIEWER 2\n@reply\ntwo\n@end\n@endif\n", &out)
	if res.Summary != "two" {
		t.Errorf("summary = %q", res.Summary)
	}
}
