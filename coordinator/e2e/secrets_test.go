package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/redact"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The secrets TestPlantedSecrets plants, each where a real one would be.
const (
	// In the task's prompt, as a user might paste it.
	promptSecret = "planted-prompt-6d1f0a93c2"
	// In a file of the repository, which the task's context packs and the
	// gate prints.
	repoSecret = "planted-repofile-41be77d0a5"
	// The agent's provider key, in the worker's secrets file, which the
	// agent prints.
	agentKeySecret = "planted-agentkey-8c03f95e1d"
)

// secretsWorkflow: one task whose prompt holds a password, whose context
// packs settings.py (an API key in it), whose agent prints its provider
// key, its prompt and its feedback; its gate prints settings.py and fails
// once, so the second attempt's feedback holds what the gate printed.
const secretsWorkflow = `name: secrets
defaults:
  agent: {adapter: claude-code}
  timeout: 2m
gates:
  - name: read-settings
    command: [gatehelper, cat, settings.py, flaky, %[1]q, "1"]
    cache: false
tasks:
  - id: deploy
    prompt: |
      Deploy it. The staging password: ` + promptSecret + `
      @env ANTHROPIC_API_KEY
      @print-prompt
      @print-feedback
      @write out.txt
      first
      @end
      @if-env SUPERVISOR_ATTEMPT 2
      @write out2.txt
      second
      @end
      @endif
    context: {strategy: implementer_targeted, targets: [settings.py]}
    gates: [read-settings]
    max_attempts: 2
`

// busTap records every message published on the fleet's NATS server.
type busTap struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (b *busTap) add(m *nats.Msg) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
}

func (b *busTap) all() []*nats.Msg {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*nats.Msg(nil), b.msgs...)
}

// leakSearch looks for the planted secrets in what it is given.
type leakSearch struct {
	t       *testing.T
	secrets []string
	places  int
	found   []string
}

func (s *leakSearch) look(where string, data []byte) {
	s.places++
	for _, secret := range s.secrets {
		if bytes.Contains(data, []byte(secret)) {
			s.found = append(s.found, fmt.Sprintf("%s holds %s", where, secret))
		}
	}
}

// TestPlantedSecrets plants secrets in a repository file, a gate's output,
// an agent's output (its provider key) and a prompt, runs the workflow on
// a fleet of separate processes, then searches everything the run left or
// sent for them (CTX-07, OT-10): every message published on NATS while it
// ran (jobs, reports, events, API replies, live log lines, KV writes), the
// event log, every object of the logs and patches buckets, every Redis key,
// every process's own log, the CLI's status, show, logs and inbox output,
// and the three processes' metrics. None may hold one. The repository's
// own bundles (submitted and result) are left out: they are the user's
// repository, settings.py included, as it is.
func TestPlantedSecrets(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	secretsFile := filepath.Join(t.TempDir(), "secrets.env")
	if err := os.WriteFile(secretsFile, []byte("ANTHROPIC_API_KEY="+agentKeySecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	coordAddr, workerAddr, gateAddr := metricsAddr(t), metricsAddr(t), metricsAddr(t)

	nc, err := nats.Connect(f.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tap := &busTap{}
	if _, err := nc.Subscribe(">", tap.add); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	strategies := []string{"--builtin-context", filepath.Join(root, "configs", "context"), "--user-context", ""}
	f.coordArgs = append([]string{"--metrics-listen", coordAddr}, strategies...)
	coord := f.coordinator("coordinator", "coordinator")
	worker := f.worker("worker-1", "--secrets-file", secretsFile, "--metrics-listen", workerAddr)
	gate := f.gaterunner("gate-1", "--metrics-listen", gateAddr)

	repo, _ := testkit.Repo(t, map[string]string{
		"README.md":   "secrets\n",
		"settings.py": "HOST = \"staging\"\nAPI_KEY = \"" + repoSecret + "\"\n",
	})
	dir := t.TempDir()
	wfFile := writeFile(t, dir, "secrets.yaml", fmt.Sprintf(secretsWorkflow, filepath.Join(dir, "flaky")))
	sub := f.cli(time.Minute, append([]string{"submit", wfFile, "--repo", repo}, strategies...)...)
	wf := wfID(t, sub)
	if !strings.Contains(sub.stderr, "secrets masked before the workflow was stored") || !strings.Contains(sub.stderr, "task deploy: prompt") {
		t.Errorf("submit does not say the prompt's secret was masked:\n%s", sub)
	}
	st := f.waitStatus(wf, "succeeded", 3*time.Minute)
	if n := st.node(t, "deploy"); n.Attempt != 2 {
		t.Fatalf("deploy took %d attempts, want 2 (the gate fails once)", n.Attempt)
	}

	// The secrets did travel where the test means them to: redacted, not
	// absent for some other reason.
	logs := f.cli(time.Minute, "logs", wf, "deploy")
	for _, want := range []string{
		"ANTHROPIC_API_KEY=" + redact.Mask,                        // the agent printed its key
		"prompt| Deploy it. The staging password: " + redact.Mask, // its prompt
		"settings.py", // the packed context
		"feedback| ",  // the second attempt's feedback
	} {
		if !strings.Contains(logs.stdout, want) {
			t.Errorf("the node's logs lack %q: the secret did not go where the test plants it\n%s", want, logs)
		}
	}
	if !strings.Contains(logs.stdout, "API_KEY = \""+redact.Mask) {
		t.Errorf("neither the packed context nor the gate's output shows settings.py's key redacted:\n%s", logs)
	}

	search := &leakSearch{t: t, secrets: []string{promptSecret, repoSecret, agentKeySecret}}
	for _, r := range []result{
		logs,
		f.cli(time.Minute, "status", wf, "-o", "json"),
		f.cli(time.Minute, "show", wf, "deploy"),
		f.cli(time.Minute, "show", wf, "deploy", "-o", "json"),
		f.cli(time.Minute, "inbox"),
		f.cli(time.Minute, "list"),
	} {
		search.look("the output of coordinator "+strings.Join(r.args, " "), []byte(r.stdout+r.stderr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	searchBus(ctx, t, search, nc, tap)
	searchRedis(ctx, t, search, f.redisURL)
	for _, p := range []*proc{coord, worker, gate} {
		search.look("the log of process "+p.name, []byte(p.logText()))
	}
	for name, addr := range map[string]string{"coordinator": coordAddr, "worker": workerAddr, "gaterunner": gateAddr} {
		search.look("the metrics of "+name, scrapeText(t, "http://"+addr+"/metrics"))
	}
	if len(search.found) > 0 {
		sort.Strings(search.found)
		t.Errorf("planted secrets leaked (%d places searched):\n%s", search.places, strings.Join(search.found, "\n"))
	} else {
		t.Logf("searched %d places; no planted secret found", search.places)
	}
}

// searchBus searches every message the tap saw but object-store chunks
// (read whole from their buckets instead, the repository bundles left
// out), and the event stream as stored.
func searchBus(ctx context.Context, t *testing.T, s *leakSearch, nc *nats.Conn, tap *busTap) {
	t.Helper()
	msgs := tap.all()
	if len(msgs) < 20 {
		t.Fatalf("the bus tap saw %d messages: it did not see the run", len(msgs))
	}
	for _, m := range msgs {
		// Object-store chunks are read whole below. The submission
		// itself is the user handing the workflow, as written, to the
		// coordinator (CTX-07 is about what leaves the coordinator); its
		// reply is searched.
		if strings.HasPrefix(m.Subject, "$O.") || m.Subject == protocol.APISubject(protocol.APISubmit) {
			continue
		}
		s.look("a message on "+m.Subject, append(append([]byte{}, m.Data...), []byte(fmt.Sprint(m.Header))...))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	cons, err := js.OrderedConsumer(ctx, protocol.StreamEvents, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			s.look("event "+m.Subject(), m.Data())
		}
		events += n
		if n == 0 {
			break
		}
	}
	if events == 0 {
		t.Fatalf("the event log is empty")
	}
	for _, bucket := range []string{protocol.BucketLogs, protocol.BucketPatches} {
		store, err := js.ObjectStore(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		infos, err := store.List(ctx)
		if err != nil {
			t.Fatalf("list %s: %v", bucket, err)
		}
		for _, info := range infos {
			if strings.HasSuffix(info.Name, ".bundle") {
				continue // the repository itself
			}
			b, err := store.GetBytes(ctx, info.Name)
			if err != nil {
				t.Fatalf("get %s/%s: %v", bucket, info.Name, err)
			}
			s.look("object "+bucket+"/"+info.Name, b)
		}
	}
}

// searchRedis searches the value of every key in the fleet's database.
func searchRedis(ctx context.Context, t *testing.T, s *leakSearch, url string) {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatalf("redis keys: %v", err)
	}
	for _, k := range keys {
		var text string
		switch typ, _ := c.Type(ctx, k).Result(); typ {
		case "string":
			text, err = c.Get(ctx, k).Result()
		case "hash":
			var m map[string]string
			m, err = c.HGetAll(ctx, k).Result()
			text = fmt.Sprint(m)
		case "list":
			var l []string
			l, err = c.LRange(ctx, k, 0, -1).Result()
			text = strings.Join(l, "\n")
		case "set":
			var l []string
			l, err = c.SMembers(ctx, k).Result()
			text = strings.Join(l, "\n")
		case "zset":
			var l []string
			l, err = c.ZRange(ctx, k, 0, -1).Result()
			text = strings.Join(l, "\n")
		case "stream":
			var l []redis.XMessage
			l, err = c.XRange(ctx, k, "-", "+").Result()
			text = fmt.Sprint(l)
		}
		if err != nil && err != redis.Nil {
			t.Fatalf("redis key %s: %v", k, err)
		}
		s.look("redis key "+k, []byte(k+"\n"+text))
	}
}

func scrapeText(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d %v", url, resp.StatusCode, err)
	}
	return b
}
