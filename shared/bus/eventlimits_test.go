package bus

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The event log is capped and cannot be rewritten: SUP_EVENTS has max
// bytes (DefaultEventsMaxBytes unless configured), discards new messages
// when full, and denies purges and message deletes, which the server then
// refuses.
func TestEventLogCappedAndUndeletable(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{})
	cfg := streamInfo(t, b, protocol.StreamEvents).Config
	if cfg.MaxBytes != DefaultEventsMaxBytes || cfg.Discard != jetstream.DiscardNew || !cfg.DenyDelete || !cfg.DenyPurge {
		t.Fatalf("events stream: max bytes %d, discard %v, deny delete %v, deny purge %v; want %d, new, true, true",
			cfg.MaxBytes, cfg.Discard, cfg.DenyDelete, cfg.DenyPurge, DefaultEventsMaxBytes)
	}
	ctx := testkit.Context(t, 10*time.Second)
	seq, _, err := b.AppendEvent(ctx, eventlog.Event{WorkflowID: "wf-a", NodeID: "n", Body: eventlog.NodeReady{Attempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.JS.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, seq); err == nil {
		t.Error("deleting an event succeeded")
	}
	if err := s.Purge(ctx); err == nil {
		t.Error("purging the event log succeeded")
	}
	if info := streamInfo(t, b, protocol.StreamEvents); info.State.Msgs != 1 {
		t.Errorf("the log holds %d events after the refused delete and purge; want 1", info.State.Msgs)
	}
}

// A full event log refuses appends with ErrEventLogFull, naming the flag
// that raises the cap, and keeps every event it holds.
func TestEventLogFullRefusesAppends(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{EventsMaxBytes: 4 << 10})
	ctx := testkit.Context(t, 20*time.Second)
	var appended uint64
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		_, _, err = b.AppendEvent(ctx, eventlog.Event{WorkflowID: "wf-a", NodeID: "n",
			Body: eventlog.NodeEscalated{Attempt: 1, Reason: strings.Repeat("x", 200)}})
		if err == nil {
			appended++
		}
	}
	if !errors.Is(err, ErrEventLogFull) || !strings.Contains(err.Error(), "--events-max-bytes") {
		t.Fatalf("after %d appends to a 4 KiB log: %v; want ErrEventLogFull naming --events-max-bytes", appended, err)
	}
	info := streamInfo(t, b, protocol.StreamEvents)
	if appended == 0 || info.State.Msgs != appended || info.State.FirstSeq != 1 {
		t.Errorf("the full log holds %d events from seq %d; want all %d appended, from 1", info.State.Msgs, info.State.FirstSeq, appended)
	}
}

// An existing deployment's event log, made before the limits (no max
// bytes, purges and deletes allowed), gets them when a coordinator opens
// the bus; a runner (EventsMaxBytes 0) keeps the cap the coordinator set;
// a build that would allow deletes again fails with an error that says
// what to do.
func TestEventLogLimitsApplyToExistingStream(t *testing.T) {
	t.Parallel()
	url := testkit.NATS(t)
	ctx := testkit.Context(t, 30*time.Second)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: protocol.StreamEvents, Subjects: []string{protocol.SubjectEvents},
		Storage: jetstream.FileStorage, Duplicates: 20 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	coord, err := Open(ctx, url, "coordinator", Config{EventsMaxBytes: 64 << 20}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	cfg := streamInfo(t, coord, protocol.StreamEvents).Config
	if cfg.MaxBytes != 64<<20 || cfg.Discard != jetstream.DiscardNew || !cfg.DenyDelete || !cfg.DenyPurge {
		t.Fatalf("updated events stream: %+v", cfg)
	}
	runner := openMore(t, url, Config{})
	if got := streamInfo(t, runner, protocol.StreamEvents).Config.MaxBytes; got != 64<<20 {
		t.Errorf("after a runner opened the bus the log's cap is %d; want the coordinator's %d", got, 64<<20)
	}
	_, err = Open(ctx, url, "old", Config{EventsMutable: true}, quiet)
	if err == nil || !strings.Contains(err.Error(), "stream SUP_EVENTS exists with a configuration this build may not change") ||
		!strings.Contains(err.Error(), "deny") {
		t.Errorf("opening with deletes allowed on a log that denies them: %v", err)
	}
}

// TestOpenLeavesUnchangedStreamsAlone checks that opening the bus on
// streams that already have its configuration updates none of them (the
// server would rewrite each one's configuration, and race with another
// runner creating its consumer), while a changed setting still updates
// its stream.
func TestOpenLeavesUnchangedStreamsAlone(t *testing.T) {
	t.Parallel()
	url := testkit.NATS(t)
	first := openMore(t, url, Config{})
	updated := make(chan string, 16)
	sub, err := first.NC.Subscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.>", func(m *nats.Msg) {
		updated <- strings.TrimPrefix(m.Subject, "$JS.EVENT.ADVISORY.STREAM.UPDATED.")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := first.NC.Flush(); err != nil {
		t.Fatal(err)
	}

	openMore(t, url, Config{}) // the same configuration
	openMore(t, url, Config{EventsMaxAge: 48 * time.Hour})
	select {
	case name := <-updated:
		if name != protocol.StreamEvents {
			t.Fatalf("stream %s updated; only %s changed", name, protocol.StreamEvents)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the events stream's new age limit was not applied")
	}
	if got := streamInfo(t, first, protocol.StreamEvents).Config.MaxAge; got != 48*time.Hour {
		t.Errorf("events max age %s; want 48h", got)
	}
	if err := first.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-updated:
		t.Errorf("stream %s updated again", name)
	case <-time.After(200 * time.Millisecond):
	}
}
