package service

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Defaults of Limits, which `serve` and `dev` use unless flags say
// otherwise.
const (
	DefaultSubmitRate           = 30
	DefaultSubmitWindow         = time.Minute
	DefaultMaxRequestBytes      = 1 << 20
	DefaultMaxWorkflowsInFlight = 100
	DefaultMaxNodesInFlight     = 10 * workflow.MaxTasks
)

// Limits bound what clients may ask of the service (LIM-24..LIM-27). A
// zero field is no limit.
type Limits struct {
	// SubmitRate is how many submissions one client may make per
	// SubmitWindow; more are refused with a 429.
	SubmitRate   int
	SubmitWindow time.Duration
	// MaxRequestBytes is the largest request body any endpoint accepts;
	// a larger one is refused with a 413.
	MaxRequestBytes int
	// MaxWorkflowsInFlight is how many unfinished workflows the
	// coordinator holds; a submission past it is refused with a 503.
	MaxWorkflowsInFlight int
	// MaxNodesInFlight is how many nodes the unfinished workflows may
	// have in all, the new one's counted; past it, a 503.
	MaxNodesInFlight int
	// MaxBundleBytes is the largest repository bundle a submission may
	// name (SIZE-05); a larger one is refused with a 413. Zero, or more
	// than protocol.MaxBundleBytes, is protocol.MaxBundleBytes: no
	// runner downloads a larger bundle.
	MaxBundleBytes int64
	// Now is the rate limiter's clock (nil: time.Now).
	Now func() time.Time
}

// DefaultLimits are the limits `serve` and `dev` apply by default.
func DefaultLimits() Limits {
	return Limits{SubmitRate: DefaultSubmitRate, SubmitWindow: DefaultSubmitWindow, MaxRequestBytes: DefaultMaxRequestBytes,
		MaxWorkflowsInFlight: DefaultMaxWorkflowsInFlight, MaxNodesInFlight: DefaultMaxNodesInFlight,
		MaxBundleBytes: protocol.MaxBundleBytes}
}

// rateLimiter counts each client's requests in fixed windows.
type rateLimiter struct {
	mu      sync.Mutex
	rate    int
	window  time.Duration
	now     func() time.Time
	clients map[string]*rateWindow
}

type rateWindow struct {
	start time.Time
	n     int
}

func newRateLimiter(l Limits) *rateLimiter {
	now := l.Now
	if now == nil {
		now = time.Now
	}
	return &rateLimiter{rate: l.SubmitRate, window: l.SubmitWindow, now: now, clients: map[string]*rateWindow{}}
}

// allow counts one request of client and reports whether it is within
// the rate, and if not, how long until the client's window ends.
func (r *rateLimiter) allow(client string) (bool, time.Duration) {
	if r.rate <= 0 || r.window <= 0 {
		return true, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if len(r.clients) > 10000 {
		// Forget clients whose window has ended, so clients that come and
		// go do not grow the map without bound.
		for k, w := range r.clients {
			if now.Sub(w.start) >= r.window {
				delete(r.clients, k)
			}
		}
	}
	w := r.clients[client]
	if w == nil || now.Sub(w.start) >= r.window {
		w = &rateWindow{start: now}
		r.clients[client] = w
	}
	if w.n >= r.rate {
		return false, w.start.Add(r.window).Sub(now)
	}
	w.n++
	return true, 0
}

// clientOf names the client that sent r: its reply subject without the
// last token. nats.go replies to requests on `<inbox prefix>.<token>`,
// the prefix one per connection, so this is the client's NATS
// connection. NATS tells a service nothing more robust within an
// account: a client that opens a new connection gets a new budget, which
// the in-flight limits bound. Requests on old-style inboxes
// (`_INBOX.<id>`) all share one budget, which only limits them more.
func clientOf(r micro.Request) string {
	reply := r.Reply()
	if i := strings.LastIndexByte(reply, '.'); i > 0 {
		return reply[:i]
	}
	return reply
}

// checkSize refuses a request body over MaxRequestBytes.
func (s *Service) checkSize(r micro.Request) error {
	if max := s.opts.Limits.MaxRequestBytes; max > 0 && len(r.Data()) > max {
		return api.TooLarge("the request is %d bytes, over the coordinator's limit of %d (--max-request-bytes)", len(r.Data()), max)
	}
	return nil
}

// checkRate counts a submission of r's client, refusing it past the rate.
func (s *Service) checkRate(r micro.Request) error {
	ok, wait := s.rate.allow(clientOf(r))
	if ok {
		return nil
	}
	l := s.opts.Limits
	return api.TooMany("more than %d submissions in %s from this client (--submit-rate, --submit-window); try again in %s",
		l.SubmitRate, l.SubmitWindow, wait.Round(time.Second)+time.Second)
}

// checkInFlight refuses a workflow of nodes nodes when the coordinator's
// unfinished workflows are at MaxWorkflowsInFlight, or their nodes with
// the new ones would pass MaxNodesInFlight. Called with s.submitMu held,
// so two submissions cannot both take the last place.
func (s *Service) checkInFlight(nodes int) error {
	l := s.opts.Limits
	if l.MaxWorkflowsInFlight <= 0 && l.MaxNodesInFlight <= 0 {
		return nil
	}
	var wfs, inFlight int
	s.wfs.Read(func(st *statemachine.State) {
		for _, w := range st.Workflows() {
			if !w.Status.Terminal() {
				wfs++
				inFlight += len(w.Nodes)
			}
		}
	})
	if l.MaxWorkflowsInFlight > 0 && wfs >= l.MaxWorkflowsInFlight {
		return api.Unavailable("the coordinator has %d workflows in flight, its limit (--max-workflows-in-flight %d); submit again when one finishes",
			wfs, l.MaxWorkflowsInFlight)
	}
	if l.MaxNodesInFlight > 0 && inFlight+nodes > l.MaxNodesInFlight {
		return api.Unavailable("the coordinator has %d nodes in flight; this workflow's %d would pass its limit (--max-nodes-in-flight %d); submit again when some finish",
			inFlight, nodes, l.MaxNodesInFlight)
	}
	return nil
}

// String describes the limits for the coordinator's start-up log.
func (l Limits) String() string {
	return fmt.Sprintf("submit-rate=%d/%s max-request-bytes=%d max-workflows-in-flight=%d max-nodes-in-flight=%d max-bundle-bytes=%d",
		l.SubmitRate, l.SubmitWindow, l.MaxRequestBytes, l.MaxWorkflowsInFlight, l.MaxNodesInFlight, l.bundleLimit())
}

// bundleLimit is MaxBundleBytes, at most protocol.MaxBundleBytes.
func (l Limits) bundleLimit() int64 {
	if l.MaxBundleBytes <= 0 || l.MaxBundleBytes > protocol.MaxBundleBytes {
		return protocol.MaxBundleBytes
	}
	return l.MaxBundleBytes
}
