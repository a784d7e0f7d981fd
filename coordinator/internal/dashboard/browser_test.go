package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Environment variables of the browser test: where its screenshots go
// (default: the test's temporary directory, printed in the log), and a
// path to copy the workflow page's screenshot to (make the README's image
// with SUPERVISOR_DASHBOARD_README_IMAGE=docs/images/dashboard.png).
const (
	artifactsEnv   = "SUPERVISOR_TEST_ARTIFACTS"
	readmeImageEnv = "SUPERVISOR_DASHBOARD_README_IMAGE"
	chromiumEnv    = "SUPERVISOR_CHROMIUM"
)

// browserYAML: design waits for a human's approval once its gate passed;
// build and docs follow it, docs after build too; lint runs beside design.
const browserYAML = `name: dashboard-demo
defaults:
  agent:
    command: [supervisor-test-agent, -p, --output-format, json]
  timeout: 2m
gates:
  - name: has-design
    command: [test, -s, design.md]
tasks:
  - id: design
    gates: [has-design]
    approval: required
    prompt: "@write design.md\nthe design\n@end\n"
  - id: lint
    gates: []
    prompt: "@write lint.txt\nclean\n@end\n"
  - id: build
    depends_on: [design, lint]
    gates: []
    prompt: "@write build.txt\nbuilt\n@end\n"
  - id: docs
    depends_on: [design, build]
    gates: []
    prompt: "@write docs.md\ndocs\n@end\n"
`

// chromium finds the browser: $SUPERVISOR_CHROMIUM, or chromium (Debian's
// package, which scripts/ensure-chromium.sh installs) and its other names.
func chromium(t *testing.T) string {
	if p := os.Getenv(chromiumEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testkit.Missing(t, "chromium (scripts/ensure-chromium.sh installs it)")
	return ""
}

// The dashboard in a real headless Chromium at 1366x768, against an
// in-process fleet running the scripted test agent: the workflows page
// lists the workflow; its DAG shows design awaiting approval; a node's page
// shows a line published on its log subject in the live tail; the operator
// approves it in the inbox through the form and its confirmation, and the
// DAG, refreshing itself, shows design and the nodes after it succeed.
// Each page's screenshot is saved and must not be blank.
func TestBrowser(t *testing.T) {
	exe := chromium(t)
	e := startEnv(t, buildTestAgent(t))
	wf := e.submit(browserYAML)
	e.waitNode(wf, "design", "awaiting_approval", 2*time.Minute)
	e.waitNode(wf, "lint", "succeeded", 2*time.Minute)

	dir := os.Getenv(artifactsEnv)
	if dir == "" {
		dir = t.TempDir()
	} else {
		dir = filepath.Join(dir, "dashboard")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1366, 768), chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelCtx()
	// The first call starts the browser, with no deadline (one would stop
	// it); each step below has its own.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}

	shots := map[string]string{}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			buf, err := chromedp.CaptureScreenshot()(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			p := filepath.Join(dir, name+".png")
			shots[name] = p
			return chromedp.Void{}, os.WriteFile(p, buf, 0o644)
		}
	}
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("the text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	row := `tr[data-workflow="` + wf + `"]`
	step("the workflows page",
		chromedp.Navigate(e.url+"login?token="+testToken), // signs in, lands on /
		chromedp.WaitVisible(row+` a`),
		shot("workflows"))
	step("the workflow's DAG",
		chromedp.Click(row+` a`),
		chromedp.WaitVisible(`svg.dag`),
		chromedp.WaitVisible(`a.dag-node[data-node="design"][data-status="awaiting_approval"]`),
		chromedp.WaitVisible(`path.edge[data-from="design"][data-to="build"]`),
		shot("workflow"))
	if s := text(`#wf-status`); s != "needs_attention" {
		t.Errorf("workflow status shown: %q", s)
	}
	step("a node's page",
		chromedp.Click(`tr[data-node="lint"] a`),
		chromedp.WaitVisible(`#tail[data-state="open"]`),
		chromedp.WaitVisible(`.attempt[data-attempt="1"]`))
	// A line published on the node's log subject reaches the live tail.
	line, _ := json.Marshal(protocol.LogLine{Attempt: 1, Kind: "text", Text: "<i>live</i> line from the agent", Time: time.Now()})
	if err := e.nc.Publish(protocol.LogSubject(wf, "lint"), line); err != nil {
		t.Fatal(err)
	}
	step("the live tail", chromedp.WaitVisible(`#tail span.line`), shot("node"))
	if s := text(`#tail`); s != "[#1 text] <i>live</i> line from the agent" {
		t.Errorf("the live tail shows %q", s)
	}
	item := `section[data-item="` + wf + `/design"]`
	step("the approval in the inbox",
		chromedp.Navigate(e.url+"inbox"),
		chromedp.WaitVisible(item+` form.decide`),
		chromedp.SetValue(item+` input[name="by"]`, "browser-operator"),
		chromedp.SetValue(item+` input[name="note"]`, "design looks right"),
		shot("inbox"),
		chromedp.Click(item+` button[value="approve"]`),
		chromedp.WaitVisible(`#confirm`),
		shot("confirm"))
	if s := text(`#confirm-summary`); !strings.Contains(s, "Approve design of workflow "+wf+" as browser-operator") {
		t.Errorf("the confirmation said %q", s)
	}
	step("the confirmed approval",
		chromedp.Click(`#confirm`),
		chromedp.WaitVisible(`#flash`),
		// The page refreshes itself until the nodes after design are done.
		chromedp.WaitVisible(`tr[data-node="design"][data-status="succeeded"]`),
		chromedp.WaitVisible(`a.dag-node[data-node="docs"][data-status="succeeded"]`),
		chromedp.WaitVisible(`path.edge.dep-succeeded[data-from="design"][data-to="docs"]`),
		// The workflow finishes after its last node, once its branch is
		// delivered: a refresh may show the one without the other.
		chromedp.WaitVisible(`#wf-status.ws-succeeded`),
		shot("workflow-approved"))
	if s := text(`#wf-status`); s != "succeeded" {
		t.Errorf("workflow status after the approval: %q", s)
	}
	if n := e.waitNode(wf, "design", "succeeded", time.Second); !strings.Contains(n.Reason, "approved by browser-operator") {
		t.Errorf("design's reason %q does not name the operator", n.Reason)
	}
	step("the fleet and breakers pages",
		chromedp.Navigate(e.url+"fleet"), chromedp.WaitVisible(`tr[data-runner="agent.dev"]`), chromedp.WaitVisible(`tr[data-runner="gate.dev"]`), shot("fleet"),
		chromedp.Navigate(e.url+"breakers"), chromedp.WaitVisible(`#breakers`), shot("breakers"))

	for name, p := range shots {
		checkNotBlank(t, name, p)
	}
	if dst := os.Getenv(readmeImageEnv); dst != "" {
		data := testkit.ReadFile(t, shots["workflow-approved"])
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("README image written to %s", dst)
	}
}

// checkNotBlank decodes a screenshot and checks it has the page's size
// and enough colours not to be blank: no colour covers nearly all of it.
func checkNotBlank(t *testing.T, name, path string) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(testkit.ReadFile(t, path)))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b := img.Bounds()
	if b.Dx() < 1000 || b.Dy() < 600 {
		t.Errorf("screenshot %s is %dx%d, want the 1366x768 window", name, b.Dx(), b.Dy())
	}
	counts := map[uint32]int{}
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			counts[key(img, x, y)]++
		}
	}
	total, top := 0, 0
	for _, n := range counts {
		total += n
		top = max(top, n)
	}
	if len(counts) < 16 || top*100 > total*97 {
		t.Errorf("screenshot %s looks blank: %d colours, the commonest covering %d%%", name, len(counts), top*100/max(total, 1))
	}
}

func key(img image.Image, x, y int) uint32 {
	r, g, b, _ := img.At(x, y).RGBA()
	return (r>>8)<<16 | (g>>8)<<8 | b>>8
}
