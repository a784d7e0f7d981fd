package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"testing"

	"github.com/supervisorhq/supervisor/worker/internal/scriptagent"
)

// @api-error stops the agent the way the real CLI stops when its API call
// fails: the error's text is the result, is_error is set and the exit code
// is 1, so that the coordinator classifies the round by that text (a rate
// limit is transient, RETRY-04); nothing after it runs.
func TestAPIError(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("SUPERVISOR_FEEDBACK_FILE", "")
	const text = "API Error: 429 rate limit exceeded; retry-after: 4"
	ran := scriptagent.Execute("@write before.txt\nx\n@end\n@api-error "+text+"\n@write after.txt\ny\n@end\n", io.Discard)
	summary, code := ran.Summary, ran.Code
	if summary != text || code != 1 {
		t.Fatalf("execute = %q, %d; want %q, 1", summary, code, text)
	}
	if _, err := os.Stat("before.txt"); err != nil {
		t.Errorf("the directive before @api-error did not run: %v", err)
	}
	if _, err := os.Stat("after.txt"); !os.IsNotExist(err) {
		t.Errorf("the directive after @api-error ran: %v", err)
	}

	var out bytes.Buffer
	emit(&out, "json", "m", summary, code, 0)
	var res struct {
		Type    string `json:"type"`
		IsError bool   `json:"is_error"`
		Result  string `json:"result"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("json output: %v\n%s", err, out.String())
	}
	if res.Type != "result" || !res.IsError || res.Result != text {
		t.Errorf("json output = %+v, want an error result carrying %q", res, text)
	}
	out.Reset()
	emit(&out, "text", "m", summary, code, 0)
	if out.String() != text+"\n" {
		t.Errorf("text output = %q, want the error's text", out.String())
	}
}
