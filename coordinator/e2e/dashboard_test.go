package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// dashboardWorkflow: check waits for a human's approval once its gate
// passed; report follows it.
const dashboardWorkflow = `name: dashboard
` + agentDefaults + answerGateSection + `tasks:
  - id: check
    gates: [answer]
    approval: required
    prompt: "@write answer.txt\n42\n@end\n"
  - id: report
    depends_on: [check]
    gates: []
    prompt: "@write report.txt\nreported\n@end\n"
`

const answerGateSection = "gates:\n" + answerGate

// The dashboard served by a separate `coordinator serve` process, its
// token from SUPERVISOR_HTTP_TOKEN (DASH-01, DASH-04): the process prints
// its address, not the token, and logs no token; off loopback reads need
// the token, so pages redirect to the sign-in page without it; with it in
// a header, the workflow's DAG is served and an approval through the
// dashboard lets the workflow finish.
func TestDashboardServe(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	const token = "e2e-dashboard-token-0123456789abcdef"
	f.env = append(f.env, "SUPERVISOR_HTTP_TOKEN="+token)
	f.coordArgs = []string{"--http-listen", fmt.Sprintf("0.0.0.0:%d", port)}
	coord := f.coordinator("coordinator", "coordinator")
	f.env = nil
	f.worker("worker-1")
	f.gaterunner("gate-1")
	base := fmt.Sprintf("http://127.0.0.1:%d/", port)

	repo, _ := testkit.Repo(t, map[string]string{"README.md": "dashboard\n"})
	r := f.cli(time.Minute, "submit", writeFile(t, t.TempDir(), "wf.yaml", dashboardWorkflow), "--repo", repo)
	if r.code != 0 {
		t.Fatalf("submit:\n%s", r)
	}
	wf := wfID(t, r)
	f.waitNode(wf, "check", "awaiting_approval", 2*time.Minute)

	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, form url.Values, withToken bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if withToken {
			req.Header.Set("X-Supervisor-Token", token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := do(http.MethodGet, "workflows/"+wf, nil, false); code != http.StatusSeeOther {
		t.Errorf("a page off loopback without the token: %d, want 303 to the sign-in page", code)
	}
	code, body := do(http.MethodGet, "workflows/"+wf, nil, true)
	if code != http.StatusOK || !strings.Contains(body, `data-node="check" data-status="awaiting_approval"`) ||
		!strings.Contains(body, `data-from="check" data-to="report"`) {
		t.Fatalf("the workflow's page: %d\n%s", code, body)
	}
	decision := url.Values{"wf": {wf}, "node": {"check"}, "action": {"approve"}, "by": {"e2e-operator"}, "confirm": {"1"}}
	if code, _ := do(http.MethodPost, "inbox/decide", decision, false); code != http.StatusForbidden {
		t.Errorf("an approval without the token: %d, want 403", code)
	}
	if code, body := do(http.MethodPost, "inbox/decide", decision, true); code != http.StatusSeeOther {
		t.Fatalf("the approval: %d\n%s", code, body)
	}
	s := f.waitStatus(wf, "succeeded", 2*time.Minute)
	if n := s.node(t, "check"); !strings.Contains(n.Reason, "approved by e2e-operator") {
		t.Errorf("check's reason %q does not name the operator", n.Reason)
	}

	logText, err := os.ReadFile(coord.log)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("dashboard: http://127.0.0.1:%d/ (to act, sign in with --http-token)", port); !strings.Contains(string(logText), want) {
		t.Errorf("the coordinator's output lacks %q:\n%s", want, logText)
	}
	if strings.Contains(string(logText), token) {
		t.Errorf("the coordinator's output contains the token")
	}
}
