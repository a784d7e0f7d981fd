// Package dashboard is the coordinator's web dashboard: server-rendered
// pages over the coordinator's NATS API (internal/api's Client, the same
// API the CLI uses), so any process with a connection to the fleet's NATS
// can serve it. Pages: workflows, one workflow's DAG, a node's attempts,
// gates, feedback and logs (with a live tail over server-sent events), the
// inbox with its decisions, the fleet and its gate cache, the circuit
// breakers. Templates and assets are embedded; writes need the token.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// DefaultListen is the address `coordinator dev` and `demo` serve the
// dashboard on unless --http-listen says otherwise.
const DefaultListen = "127.0.0.1:7070"

// MinTokenLength is the shortest --http-token accepted.
const MinTokenLength = 16

// ErrNoToken is returned by New when the token is missing or too short.
var ErrNoToken = errors.New("the dashboard needs a token (--http-token) of at least 16 characters")

// Options configures a dashboard.
type Options struct {
	// NC is a connection to the fleet's NATS: API calls and the live log
	// tail go through it.
	NC *nats.Conn
	// Listen is the address the dashboard listens on; reads are open
	// without the token only when it is a loopback address.
	Listen string
	// Token is what writes (and reads, off loopback) must present.
	Token string
	// Timeout bounds each API call (default 10s).
	Timeout time.Duration
	// Refresh is how often pages refresh themselves (default 3s).
	Refresh time.Duration
	Log     *slog.Logger
}

// Server is the dashboard's HTTP handler.
type Server struct {
	client    *api.Client
	nc        *nats.Conn
	token     string
	session   string
	csrf      string
	openReads bool
	timeout   time.Duration
	refresh   time.Duration
	log       *slog.Logger
	pages     map[string]*pageTemplate
	mux       *http.ServeMux
}

// New returns a dashboard for the fleet NC reaches.
func New(o Options) (*Server, error) {
	if len(o.Token) < MinTokenLength {
		return nil, ErrNoToken
	}
	if o.NC == nil {
		return nil, errors.New("dashboard: no NATS connection")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Refresh <= 0 {
		o.Refresh = 3 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	s := &Server{
		client: &api.Client{NC: o.NC}, nc: o.NC, token: o.Token,
		session: derived(o.Token, "session"), csrf: derived(o.Token, "csrf"),
		openReads: IsLoopback(o.Listen), timeout: o.Timeout, refresh: o.Refresh, log: o.Log, pages: pages,
	}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	static, _ := fs.Sub(staticFS, "static")
	m := http.NewServeMux()
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /login", s.login)
	m.HandleFunc("POST /login", s.login)
	m.HandleFunc("POST /logout", s.logout)
	m.HandleFunc("GET /{$}", s.reads(s.workflows))
	m.HandleFunc("GET /workflows/{wf}", s.reads(s.workflow))
	m.HandleFunc("GET /workflows/{wf}/nodes/{node}", s.reads(s.node))
	m.HandleFunc("GET /workflows/{wf}/nodes/{node}/live", s.reads(s.live))
	m.HandleFunc("GET /inbox", s.reads(s.inbox))
	m.HandleFunc("POST /inbox/decide", s.writes(s.decide))
	m.HandleFunc("GET /fleet", s.reads(s.fleet))
	m.HandleFunc("GET /breakers", s.reads(s.breakers))
	m.HandleFunc("POST /breakers/reset", s.writes(s.breakerReset))
	s.mux = m
}

// ServeHTTP serves the dashboard.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: with it, a form POST carries Origin: null
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	s.mux.ServeHTTP(w, r)
}

// reads wraps a page: it needs the read permission.
func (s *Server) reads(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.mayRead(r) {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		h(w, r)
	}
}

// writes wraps an action: POST only (the mux sees to it), with the token.
func (s *Server) writes(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !s.mayWrite(r) {
			s.renderError(w, r, http.StatusForbidden, errors.New("this action needs the dashboard's token: sign in (the token is --http-token, printed by coordinator dev) and use the page's own form"))
			return
		}
		h(w, r)
	}
}

// apiContext bounds one page's API calls.
func (s *Server) apiContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.timeout)
}

// Running is a dashboard listening on an address.
type Running struct {
	srv    *http.Server
	cancel context.CancelFunc
	ln     net.Listener
	err    chan error
}

// Listen serves s on ln until Close.
func (s *Server) Listen(ln net.Listener) *Running {
	// Requests' contexts end when Close is called, so event streams end.
	base, cancel := context.WithCancel(context.Background())
	run := &Running{
		srv: &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			BaseContext: func(net.Listener) context.Context { return base }},
		cancel: cancel, ln: ln, err: make(chan error, 1),
	}
	go func() {
		err := run.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		run.err <- err
	}()
	return run
}

// URL is the dashboard's address as a browser reaches it.
func (r *Running) URL() string {
	return URLFor(r.ln.Addr().String())
}

// URLFor is the http URL of a listen address; an unspecified host
// (all interfaces) is shown as 127.0.0.1.
func URLFor(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr + "/"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// Close stops the server, ending open event streams.
func (r *Running) Close() error {
	r.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	if err != nil {
		err = r.srv.Close()
	}
	if serr := <-r.err; serr != nil {
		return fmt.Errorf("dashboard: %w", serr)
	}
	return err
}
