// Package notify tells people outside the fleet that a human is needed or
// has decided: a JSON POST to a webhook, or a command run with the JSON on
// its standard input. Delivery is asynchronous and best effort: each
// notification is tried a few times with back-off, failures are logged,
// and nothing the engine does ever waits on it.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Notification is what a sink receives, as JSON.
type Notification struct {
	// Type is the event: node.escalated, node.awaiting_approval,
	// node.approved, node.rejected or node.retry_granted.
	Type         string    `json:"type"`
	WorkflowID   string    `json:"workflow_id"`
	WorkflowName string    `json:"workflow_name"`
	NodeID       string    `json:"node_id"`
	Attempt      int       `json:"attempt"`
	Reason       string    `json:"reason,omitempty"`
	By           string    `json:"by,omitempty"`
	Note         string    `json:"note,omitempty"`
	Time         time.Time `json:"time"`
	// Hint says what to do about it.
	Hint string `json:"hint,omitempty"`
	// TraceID is the id of the workflow's trace ("" when not traced).
	TraceID string `json:"trace_id,omitempty"`
}

// Sink delivers one notification.
type Sink interface {
	Deliver(ctx context.Context, body []byte) error
	// String names the sink in logs, secrets redacted.
	String() string
}

// Webhook POSTs the JSON to URL; any 2xx status is a delivery.
type Webhook struct {
	URL    string
	Client *http.Client
}

// Deliver posts body.
func (w Webhook) Deliver(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "supervisor-coordinator")
	c := w.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// String names the webhook by its scheme and host: tokens travel in the
// user part, the path or the query of such URLs.
func (w Webhook) String() string {
	u, err := url.Parse(w.URL)
	if err != nil || u.Host == "" {
		return "webhook (unparsable URL)"
	}
	return "webhook " + u.Scheme + "://" + u.Host + "/…"
}

// Command runs Argv (no shell) with the JSON on standard input and only
// PATH in its environment; exit status 0 is a delivery.
type Command struct {
	Argv []string
	// Path is the command's PATH (default /usr/local/bin:/usr/bin:/bin).
	Path string
}

// Deliver runs the command.
func (c Command) Deliver(ctx context.Context, body []byte) error {
	if len(c.Argv) == 0 {
		return errors.New("no command")
	}
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	path := c.Path
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	cmd.Env = []string{"PATH=" + path}
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(tail(string(out), 500)))
	}
	return nil
}

func (c Command) String() string { return "command " + strings.Join(c.Argv, " ") }

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// Options configure a Dispatcher.
type Options struct {
	// Attempts per notification and sink (default 5), the first after
	// Backoff (default 1 s) doubling to at most 1 min; each attempt may
	// take Timeout (default 10 s).
	Attempts int
	Backoff  time.Duration
	Timeout  time.Duration
	// Queue bounds the notifications waiting (default 1024); past it, new
	// ones are dropped and logged.
	Queue int
	Log   *slog.Logger
}

// Dispatcher delivers notifications to its sinks in the background.
type Dispatcher struct {
	sinks []Sink
	opts  Options
	queue chan Notification
	stop  chan struct{}
	done  sync.WaitGroup
	once  sync.Once
}

// New starts a dispatcher for sinks; Close stops it.
func New(sinks []Sink, opts Options) *Dispatcher {
	if opts.Attempts <= 0 {
		opts.Attempts = 5
	}
	if opts.Backoff <= 0 {
		opts.Backoff = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Queue <= 0 {
		opts.Queue = 1024
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	d := &Dispatcher{sinks: sinks, opts: opts, queue: make(chan Notification, opts.Queue), stop: make(chan struct{})}
	d.done.Add(1)
	go d.run()
	return d
}

// Send queues n for every sink and returns at once; a full queue drops it.
func (d *Dispatcher) Send(n Notification) {
	if d == nil || len(d.sinks) == 0 {
		return
	}
	select {
	case d.queue <- n:
	default:
		d.opts.Log.Warn("notification dropped: the queue is full", "type", n.Type, "workflow", n.WorkflowID, "node", n.NodeID)
	}
}

// Close stops delivering; notifications still queued are dropped.
func (d *Dispatcher) Close() {
	if d == nil {
		return
	}
	d.once.Do(func() { close(d.stop) })
	d.done.Wait()
}

func (d *Dispatcher) run() {
	defer d.done.Done()
	for {
		select {
		case <-d.stop:
			return
		case n := <-d.queue:
			body, err := json.Marshal(n)
			if err != nil {
				d.opts.Log.Error("notification cannot be encoded", "err", err)
				continue
			}
			for _, s := range d.sinks {
				d.deliver(s, n, body)
			}
		}
	}
}

// deliver tries one sink until it takes the notification, the attempts run
// out, or the dispatcher stops.
func (d *Dispatcher) deliver(s Sink, n Notification, body []byte) {
	wait := d.opts.Backoff
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), d.opts.Timeout)
		err := s.Deliver(ctx, body)
		cancel()
		if err == nil {
			d.opts.Log.Info("notified", "sink", s.String(), "type", n.Type, "workflow", n.WorkflowID, "node", n.NodeID)
			return
		}
		if attempt == d.opts.Attempts {
			d.opts.Log.Warn("notification not delivered; giving up", "sink", s.String(), "type", n.Type,
				"workflow", n.WorkflowID, "node", n.NodeID, "attempts", attempt, "err", err)
			return
		}
		d.opts.Log.Warn("notification not delivered; retrying", "sink", s.String(), "attempt", attempt, "retry_in", wait, "err", err)
		select {
		case <-d.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
}
