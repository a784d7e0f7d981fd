package dashboard_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/cli"
	"github.com/supervisorhq/supervisor/coordinator/internal/dashboard"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

const testToken = "dashboard-test-token-0123456789"

// env is an in-process fleet (NATS, coordinator, worker, gate runner) with
// a dashboard listening on a loopback port.
type env struct {
	t      *testing.T
	fleet  *fleet.Fleet
	nc     *nats.Conn
	client *api.Client
	url    string // the dashboard's base URL, ending in /
}

// startEnv starts the fleet (runners' PATH: the test agent's directory
// first, when agentDir is set) and the dashboard.
func startEnv(t *testing.T, agentDir string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := fleet.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Tick: 200 * time.Millisecond,
		WorkerConcurrency: 2, GateConcurrency: 2, Log: testkit.Logger(t)}
	if agentDir != "" {
		opts.SandboxPath = agentDir + ":" + jobrun.DefaultSandboxPath()
	}
	f, err := fleet.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start fleet: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	nc, err := nats.Connect(f.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dashboard.New(dashboard.Options{NC: nc, Listen: ln.Addr().String(), Token: testToken,
		Refresh: time.Second, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	run := srv.Listen(ln)
	t.Cleanup(func() {
		if err := run.Close(); err != nil {
			t.Errorf("closing the dashboard: %v", err)
		}
	})
	return &env{t: t, fleet: f, nc: nc, client: &api.Client{NC: nc}, url: run.URL()}
}

// submit submits a workflow through the CLI and returns its id.
func (e *env) submit(yaml string) string {
	e.t.Helper()
	repo, _ := testkit.Repo(e.t, map[string]string{"README.md": "dashboard\n"})
	wf := filepath.Join(e.t.TempDir(), "wf.yaml")
	testkit.WriteFile(e.t, wf, yaml)
	var out, errOut strings.Builder
	code := cli.Main([]string{"--nats=" + e.fleet.URL(), "--builtin-gates=" + e.t.TempDir(), "--user-gates=", "--timeout=60s",
		"submit", wf, "--repo", repo}, &out, &errOut)
	if code != 0 {
		e.t.Fatalf("submit: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	return strings.Fields(out.String())[0]
}

// waitNode waits until node of wf has the status.
func (e *env) waitNode(wf, node, status string, d time.Duration) api.NodeSummary {
	e.t.Helper()
	var got api.NodeSummary
	testkit.WaitFor(e.t, d, 100*time.Millisecond, "node "+node+" to be "+status, func() bool {
		st, err := e.client.Status(context.Background(), wf)
		if err != nil {
			return false
		}
		for _, n := range st.Nodes {
			if n.ID == node {
				got = n
				return string(n.Status) == status
			}
		}
		return false
	})
	return got
}

// browserClient is an HTTP client that keeps cookies and does not follow
// redirects, so tests see them.
func browserClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// get fetches a page and returns its status and body.
func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post sends a form, with extra headers, and returns the response (its
// body read into the second result).
func post(t *testing.T, c *http.Client, u string, form url.Values, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// buildTestAgent builds supervisor-test-agent (the scripted agent) into a
// directory of its own and returns the directory.
func buildTestAgent(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "supervisor-test-agent"), "./cmd/supervisor-test-agent")
	cmd.Dir = filepath.Join("..", "..", "..", "worker")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build supervisor-test-agent: %v\n%s", err, out)
	}
	return dir
}
