package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/dashboard"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// approvalYAML: a waits for a human's approval once its agent ran; b
// depends on a.
const approvalYAML = `name: dash
defaults:
  agent: {command: ["true"]}
  allow_empty: true
tasks:
  - {id: a, prompt: a, gates: [], approval: required}
  - {id: b, prompt: b, depends_on: [a], gates: []}
`

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func wantContains(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Errorf("%s lacks %q:\n%s", what, s, body)
		}
	}
}

// attemptSection is attempt n's part of a node page: from its element to
// the next attempt's ("" when the page has no such attempt).
func attemptSection(page string, n int) string {
	_, rest, ok := strings.Cut(page, fmt.Sprintf(`data-attempt="%d"`, n))
	if !ok {
		return ""
	}
	section, _, _ := strings.Cut(rest, `class="attempt"`)
	return section
}

// The pages against a real in-process fleet, and an approval through the
// dashboard's own forms: reads are open on loopback; actions need the
// signed-in session and the page's CSRF field, POST only, a confirmation
// first, and carry the operator's name to the decision.
func TestPagesAndDecision(t *testing.T) {
	e := startEnv(t, "")
	wf := e.submit(approvalYAML)
	e.waitNode(wf, "a", "awaiting_approval", time.Minute)
	c := browserClient(t)

	code, body := get(t, c, e.url)
	if code != http.StatusOK {
		t.Fatalf("workflows page: %d\n%s", code, body)
	}
	wantContains(t, "the workflows page", body, `data-workflow="`+wf+`"`, "needs_attention", `<progress max="2" value="0"`)
	_, body = get(t, c, e.url+"?status=succeeded")
	if strings.Contains(body, `data-workflow="`+wf+`"`) {
		t.Errorf("the filter on succeeded lists the waiting workflow")
	}
	_, body = get(t, c, e.url+"?status=needs_attention&q=das")
	wantContains(t, "the filtered workflows page", body, `data-workflow="`+wf+`"`)

	code, body = get(t, c, e.url+"workflows/"+wf)
	if code != http.StatusOK {
		t.Fatalf("workflow page: %d\n%s", code, body)
	}
	wantContains(t, "the workflow page", body, `<svg class="dag"`, `data-node="a" data-status="awaiting_approval"`,
		`data-node="b" data-status="pending"`, `class="edge dep-awaiting_approval" data-from="a" data-to="b"`, "Waiting for a human")

	code, body = get(t, c, e.url+"workflows/"+wf+"/nodes/a")
	if code != http.StatusOK {
		t.Fatalf("node page: %d\n%s", code, body)
	}
	wantContains(t, "the node page", body, "Attempt 1", `data-src="/workflows/`+wf+`/nodes/a/live"`, "Waiting for a human", "Sign in with the dashboard")
	if strings.Contains(body, `action="/inbox/decide"`) {
		t.Errorf("the node page offers the decision form before sign-in")
	}
	if code, _ := get(t, c, e.url+"workflows/no-such-wf"); code != http.StatusNotFound {
		t.Errorf("an unknown workflow: %d, want 404", code)
	}
	if code, _ := get(t, c, e.url+"workflows/%2A/nodes/%3E/live"); code != http.StatusNotFound {
		t.Errorf("wildcards as ids: %d, want 404", code)
	}

	_, body = get(t, c, e.url+"inbox")
	wantContains(t, "the inbox", body, `data-item="`+wf+`/a"`, "awaiting_approval")

	// Actions: GET is not one; without the token, or with the cookie but
	// not the page's CSRF field, or from another site, they are refused.
	form := url.Values{"wf": {wf}, "node": {"a"}, "action": {"approve"}, "by": {"ada"}, "confirm": {"1"}}
	if code, _ := get(t, c, e.url+"inbox/decide"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action: %d, want 405", code)
	}
	if resp, _ := post(t, c, e.url+"inbox/decide", form, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an action without the token: %d, want 403", resp.StatusCode)
	}
	if code, _ := get(t, c, e.url+"login?token=wrong-token-wrong-token"); code != http.StatusUnauthorized {
		t.Errorf("sign-in with a wrong token: %d, want 401", code)
	}
	if code, _ := get(t, c, e.url+"login?token="+testToken); code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d, want 303", code)
	}
	if resp, _ := post(t, c, e.url+"inbox/decide", form, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an action with the session but no CSRF field: %d, want 403", resp.StatusCode)
	}
	if resp, _ := post(t, c, e.url+"inbox/decide", form, map[string]string{"X-Supervisor-Token": testToken, "Origin": "http://evil.example"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an action from another origin: %d, want 403", resp.StatusCode)
	}
	_, body = get(t, c, e.url+"inbox")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil || !strings.Contains(body, `action="/inbox/decide"`) {
		t.Fatalf("the signed-in inbox has no decision form:\n%s", body)
	}
	if strings.Contains(body, testToken) {
		t.Errorf("a page carries the token itself")
	}
	form.Set("csrf", m[1])
	form.Del("confirm")
	resp, body := post(t, c, e.url+"inbox/decide", form, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Approve a of workflow "+wf+" as ada") || !strings.Contains(body, `id="confirm"`) {
		t.Fatalf("the decision's first POST: %d, want the confirmation page\n%s", resp.StatusCode, body)
	}
	if n := e.waitNode(wf, "a", "awaiting_approval", time.Second); n.Status != "awaiting_approval" {
		t.Fatalf("the confirmation page decided already")
	}
	form.Set("by", "")
	form.Set("confirm", "1")
	if resp, body := post(t, c, e.url+"inbox/decide", form, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "operator") {
		t.Errorf("a decision without the operator's name: %d\n%s", resp.StatusCode, body)
	}
	form.Set("by", "ada")
	resp, _ = post(t, c, e.url+"inbox/decide", form, nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/workflows/"+wf+"?msg=") {
		t.Fatalf("the confirmed decision: %d to %q, want 303 to the workflow", resp.StatusCode, loc)
	}
	n := e.waitNode(wf, "a", "succeeded", time.Minute)
	if !strings.Contains(n.Reason, "approved by ada") {
		t.Errorf("node a's reason %q does not name the operator", n.Reason)
	}
	e.waitNode(wf, "b", "succeeded", time.Minute)
	_, body = get(t, c, e.url+"workflows/"+wf)
	wantContains(t, "the workflow page after the approval", body, `class="edge dep-succeeded" data-from="a" data-to="b"`, `data-node="b" data-status="succeeded"`)
	_, body = get(t, c, e.url+"inbox")
	wantContains(t, "the inbox after the approval", body, "Nothing waits for a human")
}

// The fleet page shows what the fleet API answers: the in-process fleet's
// worker and gate runner, their slots, and the gate cache's figures; with
// no coordinator answering, the API's error (TestReadsNeedTokenOffLoopback
// shows one on the workflows page).
func TestFleetPage(t *testing.T) {
	e := startEnv(t, "")
	c := browserClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var f api.FleetResponse
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "both runners to announce themselves", func() bool {
		var err error
		f, err = e.client.Fleet(ctx)
		return err == nil && len(f.Runners) == 2
	})
	code, body := get(t, c, e.url+"fleet")
	if code != http.StatusOK {
		t.Fatalf("fleet page: %d\n%s", code, body)
	}
	wantContains(t, "the fleet page", body, `id="cache"`,
		fmt.Sprintf("<b>%d</b> hits · <b>%d</b> misses", f.CacheHits, f.CacheMisses))
	for _, r := range f.Runners {
		wantContains(t, "the fleet page", body, `data-runner="`+string(r.Kind)+"."+r.Host+`"`,
			fmt.Sprintf(`<td class="slots">%d/%d</td>`, r.Busy, r.Slots))
	}
	wantContains(t, "the fleet page", body, `data-runner="agent.dev"`, `data-runner="gate.dev"`)

	nc, err := nats.Connect(testkit.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	srv, err := dashboard.New(dashboard.Options{NC: nc, Listen: "127.0.0.1:0", Token: testToken, Timeout: 2 * time.Second, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	code, body = get(t, c, hs.URL+"/fleet")
	if code != http.StatusBadGateway {
		t.Errorf("fleet page with no coordinator: %d", code)
	}
	wantContains(t, "the fleet page with no coordinator", body, `class="error"`, "the fleet API answered: no coordinator is serving sup.api.fleet")
}

// The breakers page lists none on a fresh fleet; a reset of a scope with
// nothing on record shows the API's 404, with the token in a header.
func TestBreakersPage(t *testing.T) {
	e := startEnv(t, "")
	c := browserClient(t)
	code, body := get(t, c, e.url+"breakers")
	if code != http.StatusOK {
		t.Fatalf("breakers page: %d\n%s", code, body)
	}
	wantContains(t, "the breakers page", body, "No breaker has anything on record", "Policy: open after")
	resp, body := post(t, c, e.url+"breakers/reset", url.Values{"scope": {"agent:nothing"}, "by": {"ada"}, "confirm": {"1"}},
		map[string]string{"X-Supervisor-Token": testToken})
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "agent:nothing") {
		t.Errorf("reset of an unknown breaker: %d\n%s", resp.StatusCode, body)
	}
}

// The live tail: a line published on the node's log subject reaches the
// event stream.
func TestLiveLogStream(t *testing.T) {
	e := startEnv(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"workflows/wf-x/nodes/node-y/live", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("live: %d %s", resp.StatusCode, ct)
	}
	lines := bufio.NewScanner(resp.Body)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("the stream ended: %v", lines.Err())
		}
		return lines.Text()
	}
	for next() != "event: open" {
	}
	line, _ := json.Marshal(protocol.LogLine{Attempt: 2, Kind: "text", Text: "hello <b>", Time: time.Now()})
	if err := e.nc.Publish(protocol.LogSubject("wf-x", "node-y"), line); err != nil {
		t.Fatal(err)
	}
	for l := next(); l != "event: log"; l = next() {
	}
	var got protocol.LogLine
	if err := json.Unmarshal([]byte(strings.TrimPrefix(next(), "data: ")), &got); err != nil || got.Text != "hello <b>" || got.Attempt != 2 {
		t.Fatalf("the event: %+v, %v", got, err)
	}
}

// Off loopback every page needs the token; the API's failure (no
// coordinator on this NATS) is shown, not hidden.
func TestReadsNeedTokenOffLoopback(t *testing.T) {
	nc, err := nats.Connect(testkit.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := dashboard.New(dashboard.Options{NC: nc, Listen: "0.0.0.0:7070", Token: "short"}); !errors.Is(err, dashboard.ErrNoToken) {
		t.Errorf("a short token: %v, want ErrNoToken", err)
	}
	srv, err := dashboard.New(dashboard.Options{NC: nc, Listen: "0.0.0.0:7070", Token: testToken, Timeout: 2 * time.Second, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := browserClient(t)
	for _, p := range []string{"/", "/inbox", "/fleet", "/breakers", "/workflows/x", "/workflows/x/nodes/y/live"} {
		resp, err := c.Get(hs.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
			t.Errorf("GET %s without the token: %d to %q, want 303 to /login", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(b.String(), "no coordinator is serving") {
		t.Errorf("GET / with the token and no coordinator: %d\n%s", resp.StatusCode, b.String())
	}
	if code, _ := get(t, c, hs.URL+"/login"); code != http.StatusOK {
		t.Errorf("the sign-in page needs no token: %d", code)
	}
}

// On loopback, reads are open only to requests naming a loopback host: a
// site that rebinds its name to 127.0.0.1 is sent to the sign-in page.
func TestOpenReadsNeedLoopbackHost(t *testing.T) {
	nc, err := nats.Connect(testkit.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	srv, err := dashboard.New(dashboard.Options{NC: nc, Listen: "127.0.0.1:7070", Token: testToken, Timeout: time.Second, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for host, open := range map[string]bool{"127.0.0.1:7070": true, "localhost:7070": true, "[::1]:7070": true, "evil.example:7070": false, "evil.example": false} {
		req := httptest.NewRequest(http.MethodGet, "/breakers", nil)
		req.Host = host
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if got := w.Code != http.StatusSeeOther; got != open {
			t.Errorf("Host %s: %d (open: %v, want %v)", host, w.Code, got, open)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "localhost:80": true, "[::1]:7070": true, "127.1.2.3:1": true,
		":7070": false, "0.0.0.0:7070": false, "[::]:7070": false, "10.0.0.1:7070": false, "example.com:80": false, "garbage": false,
	} {
		if got := dashboard.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// A node whose gate fails: its page shows the attempt's failed gate;
// Retry with a note (the token in a header, as a script would send it)
// runs another round, and the page shows each round's feedback to the
// next; a rejection needs a reason; Reject fails the node with the reason
// and who rejected it.
func TestNodePageRetryAndReject(t *testing.T) {
	e := startEnv(t, "")
	wf := e.submit(`name: gated
defaults:
  agent: {command: ["true"]}
  allow_empty: true
  max_attempts: 1
gates:
  - {name: never, command: ["false"]}
tasks:
  - {id: a, prompt: a, gates: [never]}
`)
	e.waitNode(wf, "a", "escalated", time.Minute)
	c := browserClient(t)
	node := e.url + "workflows/" + wf + "/nodes/a"
	_, body := get(t, c, node)
	wantContains(t, "the escalated node's page", body, `data-attempt="1"`, `<td class="mono">never</td>`, `class="chip gs-failed"`, "escalated")

	token := map[string]string{"X-Supervisor-Token": testToken}
	resp, body := post(t, c, e.url+"inbox/decide", url.Values{"wf": {wf}, "node": {"a"}, "action": {"retry"}, "by": {"bob"},
		"note": {"try the other way"}, "attempts": {"1"}, "confirm": {"1"}}, token)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("retry: %d\n%s", resp.StatusCode, body)
	}
	testkit.WaitFor(t, time.Minute, 100*time.Millisecond, "the second round to escalate", func() bool {
		n := e.waitNode(wf, "a", "escalated", time.Minute)
		return n.Attempt == 2
	})
	_, body = get(t, c, node)
	wantContains(t, "the node's page after the retry", body, `data-attempt="2"`, `data-attempt="1"`, "Feedback given to the next round",
		"&#34;next_attempt&#34;: 2", "&#34;next_attempt&#34;: 3")
	// Attempt 2 failed too, which replaced the node's feedback: its
	// section still says who retried it, with the note, and what it got.
	wantContains(t, "attempt 2 on the node's page", attemptSection(body, 2),
		`Retried by <strong>bob</strong>, with a note: <q>try the other way</q>`,
		"Feedback this round received", "&#34;text&#34;: &#34;try the other way&#34;")
	if a1 := attemptSection(body, 1); strings.Contains(a1, "Retried by") || strings.Contains(a1, "Feedback this round received") {
		t.Errorf("attempt 1, started by no one's retry, shows one:\n%s", a1)
	}

	resp, body = post(t, c, e.url+"inbox/decide", url.Values{"wf": {wf}, "node": {"a"}, "action": {"reject"}, "by": {"bob"},
		"confirm": {"1"}}, token)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "needs a reason") {
		t.Errorf("a rejection without a reason: %d\n%s", resp.StatusCode, body)
	}
	resp, _ = post(t, c, e.url+"inbox/decide", url.Values{"wf": {wf}, "node": {"a"}, "action": {"reject"}, "by": {"bob"},
		"note": {"not worth it"}, "confirm": {"1"}}, token)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("reject: %d", resp.StatusCode)
	}
	if n := e.waitNode(wf, "a", "failed", time.Minute); !strings.Contains(n.Reason, "rejected by bob: not worth it") {
		t.Errorf("the rejected node's reason: %q", n.Reason)
	}
}

// TRUST-CONFIG from the dashboard: a node whose patch changes
// .supervisor/ escalates; Approve alone is refused naming the flag's
// reason, and Approve with "accept .supervisor/ changes" integrates it.
func TestApproveAcceptsConfig(t *testing.T) {
	e := startEnv(t, "")
	wf := e.submit(`name: trusted
defaults:
  agent: {command: [install, -D, README.md, .supervisor/gates.yaml]}
tasks:
  - {id: a, prompt: a, gates: []}
`)
	n := e.waitNode(wf, "a", "escalated", time.Minute)
	if !strings.Contains(n.Reason, ".supervisor/gates.yaml") {
		t.Fatalf("node a escalated for %q, want the trusted config named", n.Reason)
	}
	c := browserClient(t)
	if code, _ := get(t, c, e.url+"login?token="+testToken); code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d, want 303", code)
	}
	_, body := get(t, c, e.url+"inbox")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil || !strings.Contains(body, `name="accept_config"`) {
		t.Fatalf("the inbox's decision form has no accept_config box:\n%s", body)
	}
	form := url.Values{"wf": {wf}, "node": {"a"}, "action": {"approve"}, "by": {"ada"}, "confirm": {"1"}, "csrf": {m[1]}}
	if resp, body := post(t, c, e.url+"inbox/decide", form, nil); resp.StatusCode < 400 || !strings.Contains(body, "accept") {
		t.Fatalf("approve without accepting the config: %d, want a refusal naming it\n%s", resp.StatusCode, body)
	}
	form.Del("confirm")
	form.Set("accept_config", "1")
	_, body = post(t, c, e.url+"inbox/decide", form, nil)
	wantContains(t, "the confirmation", body, "changes to .supervisor/", `name="accept_config" value="1"`)
	form.Set("confirm", "1")
	if resp, _ := post(t, c, e.url+"inbox/decide", form, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve accepting the config: %d, want 303", resp.StatusCode)
	}
	e.waitNode(wf, "a", "succeeded", time.Minute)
}
