// Package egress is the network way out of agent containers: an HTTP
// proxy that opens CONNECT tunnels (and forwards plain HTTP requests) only
// to the host:port pairs of an allow-list, and logs every connection it
// refuses with the host it asked for. The worker runs it in its own
// process, listening on an internal Docker network that agent containers
// join (see Gateway): the network has no route out, so the proxy is the
// only way anything in an agent container reaches the outside, and only
// where the allow-list says.
//
// The allow-list matches the host:port the client asks for, by name: the
// proxy resolves names itself, so a client cannot reach an address by
// naming an allowed host. Entries are exact "host:port" (a name or an IP
// literal, IPv6 in brackets) or "*.domain:port", which matches every name
// below domain (not domain itself).
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Proxy.
const (
	// DefaultPort is the proxy's conventional port (the worker's
	// --egress-proxy-port default).
	DefaultPort = 3128
	// DefaultDialTimeout bounds connecting to an allowed destination.
	DefaultDialTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a tunnel or forwarded request in which no
	// byte moved either way for this long. Model APIs stream their answers,
	// so a live request is never idle this long.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultHeaderTimeout bounds reading a request's header.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultMaxTunnels bounds the tunnels and forwarded requests open at
	// once; more are refused with 503.
	DefaultMaxTunnels = 256
)

// DefaultAllow is the default allow-list of agent containers: the model
// providers' APIs.
var DefaultAllow = []string{"api.anthropic.com:443", "api.openai.com:443", "generativelanguage.googleapis.com:443"}

// rule is one allow-list entry: host (lower case, no trailing dot; for a
// wildcard, the domain with a leading dot) and port.
type rule struct {
	host     string
	port     string
	wildcard bool
}

// AllowList is a parsed allow-list. The zero value allows nothing.
type AllowList struct {
	rules []rule
}

// ParseAllowList parses host:port entries (blank ones are skipped; see the
// package documentation for the syntax).
func ParseAllowList(entries []string) (*AllowList, error) {
	a := &AllowList{}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		host, port, err := net.SplitHostPort(e)
		if err != nil || host == "" {
			return nil, fmt.Errorf("egress: allow-list entry %q is not host:port", e)
		}
		if !validPort(port) {
			return nil, fmt.Errorf("egress: allow-list entry %q: invalid port %q", e, port)
		}
		host = normalizeHost(host)
		r := rule{host: host, port: port}
		if strings.HasPrefix(host, "*.") {
			r.host, r.wildcard = host[1:], true
		}
		name := r.host
		if r.wildcard {
			name = r.host[1:] // the domain, without the dot
		}
		if strings.Contains(r.host, "*") || strings.ContainsAny(r.host, "/ \t,") ||
			name == "" || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
			// An empty label ("a..b", "x..") names no host: a rule for it could never match.
			return nil, fmt.Errorf("egress: allow-list entry %q: want host:port or *.domain:port", e)
		}
		a.rules = append(a.rules, r)
	}
	return a, nil
}

// Allows reports whether the list allows host:port.
func (a *AllowList) Allows(host, port string) bool {
	if a == nil {
		return false
	}
	host = normalizeHost(host)
	for _, r := range a.rules {
		if r.port != port {
			continue
		}
		if r.wildcard {
			if strings.HasSuffix(host, r.host) && len(host) > len(r.host) {
				return true
			}
		} else if host == r.host {
			return true
		}
	}
	return false
}

// Entries returns the list in host:port form, normalized.
func (a *AllowList) Entries() []string {
	if a == nil {
		return nil
	}
	out := make([]string, 0, len(a.rules))
	for _, r := range a.rules {
		h := r.host
		if r.wildcard {
			h = "*" + h
		}
		out = append(out, net.JoinHostPort(h, r.port))
	}
	return out
}

// normalizeHost lower-cases a host name and drops a trailing dot.
func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == p
}

// Options configures a Proxy. Zero values mean the defaults.
type Options struct {
	// Allow is the allow-list (see ParseAllowList). Empty allows nothing.
	Allow []string
	// Log receives a Warn line "egress denied" with host, port, job and
	// client for every refused destination (nil = slog.Default()).
	Log         *slog.Logger
	DialTimeout time.Duration
	IdleTimeout time.Duration
	// HeaderTimeout bounds reading a request's header (Serve only).
	HeaderTimeout time.Duration
	MaxTunnels    int
	// Dial connects to an allowed destination (nil = a net.Dialer). Tests
	// use it to map names to local servers.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Identify names the job behind a client address ("ip:port") for the
	// log; nil, or "" returned, logs the job as unknown. It is called only
	// for refused and failed connections.
	Identify func(remote string) string
}

// Proxy is the allow-listing HTTP proxy; it is an http.Handler, and Serve
// runs it on a listener. It is safe for concurrent use.
type Proxy struct {
	allow         *AllowList
	log           *slog.Logger
	dialTimeout   time.Duration
	idleTimeout   time.Duration
	headerTimeout time.Duration
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	identify      func(remote string) string
	slots         chan struct{}
	forwarder     *httputil.ReverseProxy

	mu      sync.Mutex
	conns   map[net.Conn]struct{} // hijacked tunnel ends, closed by Close
	servers []*http.Server
	closed  bool
}

// New returns a Proxy.
func New(opts Options) (*Proxy, error) {
	allow, err := ParseAllowList(opts.Allow)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		allow:         allow,
		log:           opts.Log,
		dialTimeout:   opts.DialTimeout,
		idleTimeout:   opts.IdleTimeout,
		headerTimeout: opts.HeaderTimeout,
		dial:          opts.Dial,
		identify:      opts.Identify,
		conns:         map[net.Conn]struct{}{},
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.dialTimeout <= 0 {
		p.dialTimeout = DefaultDialTimeout
	}
	if p.idleTimeout <= 0 {
		p.idleTimeout = DefaultIdleTimeout
	}
	if p.headerTimeout <= 0 {
		p.headerTimeout = DefaultHeaderTimeout
	}
	if p.dial == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		p.dial = d.DialContext
	}
	max := opts.MaxTunnels
	if max <= 0 {
		max = DefaultMaxTunnels
	}
	p.slots = make(chan struct{}, max)
	transport := &http.Transport{
		Proxy: nil, // never chain to the worker's own proxy settings
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := p.dialAllowed(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, idle: p.idleTimeout}, nil
		},
		ForceAttemptHTTP2:     false,
		MaxIdleConns:          16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: p.idleTimeout,
		TLSHandshakeTimeout:   p.dialTimeout,
	}
	p.forwarder = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := *pr.In.URL
			pr.Out.URL = &u
			pr.Out.Host = ""
			pr.Out.Header.Del("Proxy-Authorization")
			pr.Out.Header.Del("Proxy-Connection")
		},
		Transport: transport,
		ErrorLog:  slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.log.Warn("egress request failed", "host", r.URL.Hostname(), "port", portOf(r.URL.Port(), r.URL.Scheme),
				"job", p.job(r.RemoteAddr), "client", r.RemoteAddr, "err", err)
			http.Error(w, "egress: "+err.Error(), http.StatusBadGateway)
		},
	}
	return p, nil
}

// Allowed returns the proxy's allow-list, normalized.
func (p *Proxy) Allowed() []string { return p.allow.Entries() }

// Serve accepts proxy connections on ln until Close; it returns nil after
// Close and the listener's error otherwise.
func (p *Proxy) Serve(ln net.Listener) error {
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: p.headerTimeout,
		IdleTimeout:       p.idleTimeout,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	p.servers = append(p.servers, srv)
	p.mu.Unlock()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops every Serve and closes every open tunnel.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	servers := p.servers
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	var errs []error
	for _, s := range servers {
		errs = append(errs, s.Close())
	}
	for c := range conns {
		_ = c.Close()
	}
	return errors.Join(errs...)
}

// ServeHTTP handles one proxy request: CONNECT host:port opens a tunnel,
// an absolute-form http:// request is forwarded, anything else is a 400.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if r.URL.IsAbs() && r.URL.Scheme == "http" && r.URL.Host != "" {
		p.forward(w, r)
		return
	}
	p.log.Debug("egress: not a proxy request", "method", r.Method, "uri", r.RequestURI, "client", r.RemoteAddr)
	http.Error(w, "egress: this is a proxy: use CONNECT host:port, or an absolute http:// URL", http.StatusBadRequest)
}

// connect handles CONNECT host:port.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	if target == "" {
		target = r.URL.Host
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil || host == "" || !validPort(port) {
		p.log.Info("egress: malformed CONNECT", "target", target, "client", r.RemoteAddr)
		http.Error(w, "egress: CONNECT needs host:port", http.StatusBadRequest)
		return
	}
	if !p.admit(w, r, host, port) {
		return
	}
	defer p.release()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "egress: cannot tunnel over this connection", http.StatusInternalServerError)
		return
	}
	upstream, err := p.dialAllowed(r.Context(), "tcp", net.JoinHostPort(host, port))
	if err != nil {
		p.log.Warn("egress dial failed", "host", host, "port", port, "job", p.job(r.RemoteAddr), "client", r.RemoteAddr, "err", err)
		http.Error(w, "egress: cannot connect to "+target, http.StatusBadGateway)
		return
	}
	client, rw, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		p.log.Warn("egress: hijack failed", "err", err)
		return
	}
	if !p.track(client, upstream) {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	defer p.untrack(client, upstream)
	defer client.Close()
	defer upstream.Close()
	_ = client.SetDeadline(time.Time{})
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent right behind the request (a TLS ClientHello)
	// may already sit in the server's buffer.
	if n := rw.Reader.Buffered(); n > 0 {
		buf, _ := rw.Reader.Peek(n)
		_ = upstream.SetWriteDeadline(time.Now().Add(p.idleTimeout))
		if _, err := upstream.Write(buf); err != nil {
			return
		}
	}
	p.log.Debug("egress tunnel", "host", host, "port", port, "client", r.RemoteAddr)
	splice(client, upstream, p.idleTimeout)
}

// forward handles an absolute-form plain HTTP request.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	host, port := r.URL.Hostname(), portOf(r.URL.Port(), "http")
	if host == "" || !validPort(port) {
		http.Error(w, "egress: malformed URL", http.StatusBadRequest)
		return
	}
	if !p.admit(w, r, host, port) {
		return
	}
	defer p.release()
	p.forwarder.ServeHTTP(w, r)
}

// portOf returns port, or the scheme's default port.
func portOf(port, scheme string) string {
	if port != "" {
		return port
	}
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// dialAllowed connects to an address the allow-list has been checked for.
func (p *Proxy) dialAllowed(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
	defer cancel()
	return p.dial(ctx, network, addr)
}

// admit reports whether a request for host:port may go ahead: the
// allow-list allows it and a connection slot is free (the caller releases
// it). Otherwise it answers the request, denied or busy.
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request, host, port string) bool {
	if !p.allow.Allows(host, port) {
		p.deny(w, r, host, port)
		return false
	}
	if !p.acquire() {
		p.busy(w, r, host, port)
		return false
	}
	return true
}

func (p *Proxy) deny(w http.ResponseWriter, r *http.Request, host, port string) {
	p.log.Warn("egress denied", "host", host, "port", port, "job", p.job(r.RemoteAddr),
		"client", r.RemoteAddr, "method", r.Method)
	http.Error(w, fmt.Sprintf("egress: %s is not on the allow-list", net.JoinHostPort(host, port)), http.StatusForbidden)
}

func (p *Proxy) busy(w http.ResponseWriter, r *http.Request, host, port string) {
	p.log.Warn("egress: too many open tunnels; refusing", "host", host, "port", port,
		"job", p.job(r.RemoteAddr), "client", r.RemoteAddr, "max", cap(p.slots))
	w.Header().Set("Retry-After", "1")
	http.Error(w, "egress: too many open connections", http.StatusServiceUnavailable)
}

// job names the job behind a client address, "unknown" if it cannot.
func (p *Proxy) job(remote string) string {
	if p.identify != nil {
		if j := p.identify(remote); j != "" {
			return j
		}
	}
	return "unknown"
}

func (p *Proxy) acquire() bool {
	select {
	case p.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (p *Proxy) release() { <-p.slots }

// track registers a tunnel's ends for Close; false if already closed.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// splice copies both ways between a and b until both directions ended, an
// error, or idle passed with no byte moving either way. An end of stream
// in one direction is passed on as a half-close.
func splice(a, b net.Conn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	done := make(chan struct{}, 2)
	copyDir := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			_ = src.SetReadDeadline(time.Now().Add(idle))
			n, err := src.Read(buf)
			if n > 0 {
				last.Store(time.Now().UnixNano())
				_ = dst.SetWriteDeadline(time.Now().Add(idle))
				if _, werr := dst.Write(buf[:n]); werr != nil {
					_ = a.Close()
					_ = b.Close()
					return
				}
			}
			if err == nil {
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, last.Load())) < idle {
				continue // the other direction is busy
			}
			if errors.Is(err, io.EOF) {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
					return
				}
			}
			_ = a.Close()
			_ = b.Close()
			return
		}
	}
	go copyDir(b, a)
	go copyDir(a, b)
	<-done
	<-done
}

// idleConn is a connection whose reads and writes fail after idle with no
// progress (forwarded plain HTTP requests).
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(p)
}

func (c *idleConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(p)
}
