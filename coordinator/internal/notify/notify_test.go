package notify

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A command gets the notification on standard input, with nothing of the
// coordinator's environment but PATH.
func TestCommandSink(t *testing.T) {
	t.Setenv("SUPERVISOR_TEST_SECRET", "must-not-leak")
	dir := t.TempDir()
	out, env := filepath.Join(dir, "got.json"), filepath.Join(dir, "env")
	d := New([]Sink{Command{Argv: []string{"tee", out}}}, Options{Log: quiet()})
	d.Send(Notification{Type: "node.escalated", WorkflowID: "wf-1", NodeID: "a", Reason: "gate failed"})
	deadline := time.Now().Add(10 * time.Second)
	var data []byte
	for time.Now().Before(deadline) {
		if data, _ = os.ReadFile(out); len(data) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.Close()
	if err := (Command{Argv: []string{"sh", "-c", "env > " + env}}).Deliver(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	var n Notification
	if err := json.Unmarshal(data, &n); err != nil || n.Type != "node.escalated" || n.Reason != "gate failed" {
		t.Errorf("the command got %q (%v)", data, err)
	}
	if e, _ := os.ReadFile(env); strings.Contains(string(e), "must-not-leak") || !strings.Contains(string(e), "PATH=") {
		t.Errorf("the command's environment:\n%s", e)
	}
	if err := (Command{Argv: []string{"false"}}).Deliver(context.Background(), nil); err == nil {
		t.Error("a failing command delivered")
	}
}

// A webhook that keeps failing is tried Attempts times, then given up;
// its URL's secrets never reach a log line.
func TestWebhookRetriesAndRedaction(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	var logs strings.Builder
	hook := Webhook{URL: strings.Replace(srv.URL, "http://", "http://user:pw@", 1) + "/T0/B0/XSECRET?token=t0k"}
	d := New([]Sink{hook}, Options{Attempts: 3, Backoff: 10 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	d.Send(Notification{Type: "node.approved", WorkflowID: "wf-1", NodeID: "a"})
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	d.Close()
	if got := calls.Load(); got != 3 {
		t.Errorf("%d calls, want 3", got)
	}
	for _, secret := range []string{"pw", "XSECRET", "t0k"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the logs show %q:\n%s", secret, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "giving up") {
		t.Errorf("no give-up line:\n%s", logs.String())
	}
}

// Send never blocks: past the queue, notifications are dropped.
func TestSendNeverBlocks(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	d := New([]Sink{Webhook{URL: srv.URL}}, Options{Queue: 2, Timeout: time.Minute, Log: quiet()})
	sent := make(chan struct{})
	go func() {
		for range 100 {
			d.Send(Notification{Type: "node.escalated"})
		}
		close(sent)
	}()
	select {
	case <-sent:
	case <-time.After(30 * time.Second):
		t.Error("Send blocked behind a webhook that does not answer")
	}
	close(block) // the webhook answers; the dispatcher can stop
	d.Close()
	srv.Close()
	var nilD *Dispatcher
	nilD.Send(Notification{}) // no dispatcher: nothing happens
}
