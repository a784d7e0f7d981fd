package cli

// watch's live progress line: on a terminal, the transition lines scroll
// above one line that is drawn again in place every second and after each
// event (done/total nodes, running, failed, waiting for a human, elapsed).

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Progress refreshes: the line is drawn every progressTick, and the
// workflow's status asked again after an event, or every progressRefresh
// when none comes.
const (
	progressTick    = time.Second
	progressRefresh = 5 * time.Second
)

// clearLine returns the cursor to the start of the line and erases it.
const clearLine = "\r\x1b[2K"

// terminalWidth returns the width of w when it is a terminal (ok false
// when it is not one: a pipe, a file).
func terminalWidth(w io.Writer) (width int, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil || width <= 0 {
		width = 80
	}
	return width, true
}

// liveLine keeps one line at the bottom of a terminal: what is written
// through it appears above the line, which is drawn again after each
// complete line written.
type liveLine struct {
	mu    sync.Mutex
	w     io.Writer
	width int
	// line is the progress line; shown is set while it is on the screen
	// with the cursor at its end.
	line  string
	shown bool
}

func newLiveLine(w io.Writer, width int) *liveLine { return &liveLine{w: w, width: width} }

// Write erases the line, writes p and draws the line again if p ends a
// line.
func (l *liveLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shown {
		if _, err := io.WriteString(l.w, clearLine); err != nil {
			return 0, err
		}
		l.shown = false
	}
	n, err := l.w.Write(p)
	if err == nil && len(p) > 0 && p[len(p)-1] == '\n' {
		l.draw()
	}
	return n, err
}

// Set replaces the line and draws it.
func (l *liveLine) Set(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.line = line
	if l.shown {
		_, _ = io.WriteString(l.w, clearLine)
		l.shown = false
	}
	l.draw()
}

// Done leaves the line as it is on the screen, ends it, and draws it no
// more.
func (l *liveLine) Done() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shown {
		_, _ = io.WriteString(l.w, "\n")
	}
	l.line, l.shown = "", false
}

// draw writes the line, cut to the terminal's width so it never wraps
// (a wrapped line could not be erased in place). l.mu is held.
func (l *liveLine) draw() {
	if l.line == "" {
		return
	}
	line := l.line
	if l.width > 1 && utf8.RuneCountInString(line) > l.width-1 {
		r := []rune(line)
		line = string(r[:l.width-2]) + "…"
	}
	if _, err := io.WriteString(l.w, line); err == nil {
		l.shown = true
	}
}

// progressLine is a workflow's progress in one line: "wf-… running:
// 3/7 nodes done, 2 running, 1 failed, 1 waiting for a human, 2m13s".
// Done counts the nodes in a final state (succeeded, failed, skipped,
// cancelled); running those in flight (running, gating, integrating);
// waiting for a human the escalated and those awaiting approval.
func progressLine(s api.WorkflowSummary, now time.Time) string {
	count := func(st ...protocol.NodeStatus) int {
		n := 0
		for _, x := range st {
			n += s.Counts[string(x)]
		}
		return n
	}
	total := 0
	for _, n := range s.Counts {
		total += n
	}
	done := count(protocol.NodeSucceeded, protocol.NodeFailed, protocol.NodeSkipped, protocol.NodeCancelled)
	end := now
	if s.FinishedAt != nil {
		end = *s.FinishedAt
	}
	parts := []string{
		fmt.Sprintf("%d/%d nodes done", done, total),
		fmt.Sprintf("%d running", count(protocol.NodeRunning, protocol.NodeGating, protocol.NodeIntegrating)),
		fmt.Sprintf("%d failed", count(protocol.NodeFailed)),
		fmt.Sprintf("%d waiting for a human", count(protocol.NodeEscalated, protocol.NodeAwaitingApproval)),
	}
	if n := count(protocol.NodeRetrying); n > 0 {
		parts = append(parts, fmt.Sprintf("%d retrying", n))
	}
	parts = append(parts, max(end.Sub(s.SubmittedAt), 0).Truncate(time.Second).String())
	return fmt.Sprintf("%s %s: %s", s.ID, s.Status, strings.Join(parts, ", "))
}

// progress draws a workflow's progress line on a liveLine until stopped.
type progress struct {
	live   *liveLine
	status func(ctx context.Context) (api.WorkflowSummary, error)
	stale  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}

	// sum is the latest status (nil before the first answer), fetched
	// when; only the drawing goroutine touches them.
	sum     *api.WorkflowSummary
	fetched time.Time
	// ended is set while the events say the workflow has finished (Ended).
	ended atomic.Bool
}

// Ended says whether the workflow's events say it has finished, so that
// Stop's last line waits for the coordinator's status to say so too: the
// event reaches a watcher before the coordinator has folded it.
func (p *progress) Ended(ended bool) { p.ended.Store(ended) }

// startProgress draws the line of the workflow whose status fetches
// until stop.
func startProgress(live *liveLine, status func(ctx context.Context) (api.WorkflowSummary, error)) *progress {
	ctx, cancel := context.WithCancel(context.Background())
	p := &progress{live: live, status: status, stale: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go p.run(ctx)
	return p
}

// Changed says the workflow moved: its status is asked again at the next
// tick.
func (p *progress) Changed() {
	select {
	case p.stale <- struct{}{}:
	default:
	}
}

func (p *progress) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(progressTick)
	defer t.Stop()
	p.fetch(ctx)
	p.draw()
	stale := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.stale:
			stale = true
			continue
		case <-t.C:
		}
		if stale || time.Since(p.fetched) >= progressRefresh {
			p.fetch(ctx)
			stale = false
		}
		p.draw()
	}
}

func (p *progress) fetch(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, progressRefresh)
	defer cancel()
	if s, err := p.status(rctx); err == nil {
		p.sum, p.fetched = &s, time.Now()
	}
}

func (p *progress) draw() {
	if p.sum != nil {
		p.live.Set(progressLine(*p.sum, time.Now()))
	}
}

// Stop draws the line a last time with the workflow's latest status and
// leaves it on the screen.
func (p *progress) Stop() {
	p.cancel()
	<-p.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.fetch(ctx)
	for p.ended.Load() && (p.sum == nil || p.sum.FinishedAt == nil) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
			p.fetch(ctx)
		}
	}
	p.draw()
	p.live.Done()
}
