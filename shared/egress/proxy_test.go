package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

func TestParseAllowList(t *testing.T) {
	a, err := ParseAllowList([]string{"API.Anthropic.com:443", " ", "*.googleapis.com:443", "10.0.0.1:8080", "[::1]:9000", "dot.example.:80"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host, port string
		want       bool
	}{
		{"api.anthropic.com", "443", true},
		{"API.ANTHROPIC.COM.", "443", true},
		{"api.anthropic.com", "80", false},
		{"anthropic.com", "443", false},
		{"evil-api.anthropic.com", "443", false},
		{"generativelanguage.googleapis.com", "443", true},
		{"a.b.googleapis.com", "443", true},
		{"googleapis.com", "443", false},
		{"xgoogleapis.com", "443", false},
		{"googleapis.com.evil.com", "443", false},
		{"10.0.0.1", "8080", true},
		{"10.0.0.2", "8080", false},
		{"::1", "9000", true},
		{"dot.example", "80", true},
	} {
		if got := a.Allows(c.host, c.port); got != c.want {
			t.Errorf("Allows(%s, %s) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	want := []string{"api.anthropic.com:443", "*.googleapis.com:443", "10.0.0.1:8080", "[::1]:9000", "dot.example:80"}
	if got := a.Entries(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Entries = %v, want %v", got, want)
	}
	if (&AllowList{}).Allows("api.anthropic.com", "443") || (*AllowList)(nil).Allows("x", "1") {
		t.Error("an empty list allows something")
	}
	for _, bad := range []string{"api.anthropic.com", ":443", "host:0", "host:65536", "host:https", "host:0443",
		"a.*.com:443", "*:443", "*.:443", ".:443", "..:443", "a..b:443", "x..:443", ".x:443", "*..x:443", "ho st:443", "a,b:443"} {
		if _, err := ParseAllowList([]string{bad}); err == nil {
			t.Errorf("ParseAllowList(%q) accepted", bad)
		}
	}
	if len(DefaultAllow) != 3 {
		t.Errorf("DefaultAllow = %v", DefaultAllow)
	}
	if _, err := ParseAllowList(DefaultAllow); err != nil {
		t.Errorf("DefaultAllow: %v", err)
	}
}

// startProxy serves a proxy on 127.0.0.1 and returns its address and log.
func startProxy(t *testing.T, opts Options) (string, *testkit.Buffer, *Proxy) {
	t.Helper()
	logs := &testkit.Buffer{}
	opts.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		_ = p.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String(), logs, p
}

// rawConnect sends CONNECT target to the proxy and returns the response
// and the connection (open, for a 200).
func rawConnect(t *testing.T, proxy, target string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	_ = c.SetDeadline(time.Time{})
	return resp, c, br
}

// tlsServer is an HTTPS test server answering "hello from NAME".
func tlsServer(t *testing.T, name string) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s %s", name, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// proxiedClient is an HTTP client using the proxy, trusting srv.
func proxiedClient(proxy string, srv *httptest.Server) *http.Client {
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestConnectAllowed(t *testing.T) {
	srv := tlsServer(t, "allowed")
	target := strings.TrimPrefix(srv.URL, "https://")
	proxy, logs, _ := startProxy(t, Options{Allow: []string{target}})

	resp, err := proxiedClient(proxy, srv).Get(srv.URL + "/v1/messages")
	if err != nil {
		t.Fatalf("GET through the proxy: %v\nlog:\n%s", err, logs)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello from allowed /v1/messages" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if strings.Contains(logs.String(), "denied") {
		t.Errorf("an allowed connection was logged as denied:\n%s", logs)
	}
}

func TestConnectDenied(t *testing.T) {
	srv := tlsServer(t, "allowed")
	target := strings.TrimPrefix(srv.URL, "https://")
	dialed := make(chan string, 10)
	proxy, logs, _ := startProxy(t, Options{
		Allow:    []string{target},
		Identify: func(remote string) string { return "wf1/n1/a2" },
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialed <- addr
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	})

	resp, _, _ := rawConnect(t, proxy, "exfil.example.com:443")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("denied CONNECT: status %d, want 403", resp.StatusCode)
	}
	line := `msg="egress denied" host=exfil.example.com port=443 job=wf1/n1/a2 client=127.0.0.1:`
	if !strings.Contains(logs.String(), line) {
		t.Errorf("log lacks %q:\n%s", line, logs)
	}
	// The allowed host on another port is denied too.
	host, _, _ := net.SplitHostPort(target)
	if resp, _, _ := rawConnect(t, proxy, net.JoinHostPort(host, "1")); resp.StatusCode != http.StatusForbidden {
		t.Errorf("allowed host, other port: status %d", resp.StatusCode)
	}
	// The Go client sees the refusal as an error naming the status.
	other := tlsServer(t, "other")
	if _, err := proxiedClient(proxy, other).Get(other.URL); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("GET of a denied host: err = %v, want Forbidden", err)
	}
	select {
	case addr := <-dialed:
		t.Errorf("the proxy dialed %s for a denied request", addr)
	default:
	}
}

func TestConnectWildcard(t *testing.T) {
	srv := tlsServer(t, "wild")
	backend := strings.TrimPrefix(srv.URL, "https://")
	proxy, logs, _ := startProxy(t, Options{
		Allow: []string{"*.allowed.test:443"},
		// Every name goes to the test server.
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, backend)
		},
	})
	for target, want := range map[string]int{
		"api.allowed.test:443":   200,
		"a.b.ALLOWED.test.:443":  200,
		"allowed.test:443":       403,
		"api.allowed.test:444":   403,
		"api.allowed.test.x:443": 403,
		"notallowed.test:443":    403,
	} {
		resp, c, br := rawConnect(t, proxy, target)
		if resp.StatusCode != want {
			t.Errorf("CONNECT %s: %d, want %d", target, resp.StatusCode, want)
			continue
		}
		if want != 200 {
			continue
		}
		// TLS through the tunnel to the test server.
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{InsecureSkipVerify: true, ServerName: "api.allowed.test"})
		fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: close\r\n\r\n")
		r, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Errorf("%s: request through the tunnel: %v", target, err)
			continue
		}
		body, _ := io.ReadAll(r.Body)
		if string(body) != "hello from wild /x" {
			t.Errorf("%s: body %q", target, body)
		}
	}
	if !strings.Contains(logs.String(), "host=allowed.test port=443 job=unknown") {
		t.Errorf("log lacks the denied apex domain:\n%s", logs)
	}
}

// bufConn reads through a bufio.Reader that may hold bytes already.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestMalformedRequests(t *testing.T) {
	proxy, _, _ := startProxy(t, Options{Allow: []string{"example.com:443"}})
	for _, target := range []string{"example.com", ":443", "example.com:0", "example.com:https", "example.com:99999"} {
		resp, _, _ := rawConnect(t, proxy, target)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("CONNECT %q: status %d, want 400", target, resp.StatusCode)
		}
	}
	// Requests that are not proxy requests.
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GARBAGE\r\n\r\n",
	} {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Errorf("%q: %v", raw, err)
			continue
		}
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: status %d, want 400", raw, resp.StatusCode)
		}
	}
}

func TestPlainHTTP(t *testing.T) {
	var gotHeader http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHeader = r.Header.Clone()
		fmt.Fprintf(w, "plain %s %s", r.Method, r.URL.Path)
	}))
	defer srv.Close()
	target := strings.TrimPrefix(srv.URL, "http://")
	proxy, logs, _ := startProxy(t, Options{Allow: []string{target}})
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})}, Timeout: 10 * time.Second}

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ok", nil)
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "plain GET /ok" {
		t.Fatalf("allowed plain request: %d %q", resp.StatusCode, body)
	}
	if gotHeader.Get("Proxy-Authorization") != "" {
		t.Error("Proxy-Authorization was passed on")
	}

	resp, err = client.Get("http://denied.example:8080/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("denied plain request: %d", resp.StatusCode)
	}
	if !strings.Contains(logs.String(), `msg="egress denied" host=denied.example port=8080`) {
		t.Errorf("log lacks the denied plain request:\n%s", logs)
	}
	// Port 80 is implied.
	resp, err = client.Get("http://denied.example/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.Contains(logs.String(), `host=denied.example port=80 `) {
		t.Errorf("log lacks the implied port 80:\n%s", logs)
	}
}

// echoServer echoes every connection; it returns its address.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestTunnelLimitAndTimeouts(t *testing.T) {
	echo := echoServer(t)
	proxy, logs, p := startProxy(t, Options{Allow: []string{echo, "127.0.0.1:1"}, MaxTunnels: 1, IdleTimeout: 300 * time.Millisecond})

	// A tunnel works both ways, including bytes sent right behind CONNECT.
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nearly-", echo, echo)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || line != "early-ping\n" {
		t.Fatalf("echo: %q, %v", line, err)
	}

	// One tunnel is the limit: a second is refused with 503.
	resp2, _, _ := rawConnect(t, proxy, echo)
	if resp2.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("second tunnel: %d, want 503", resp2.StatusCode)
	}

	// Activity keeps the tunnel open past the idle timeout...
	for i := 0; i < 4; i++ {
		time.Sleep(150 * time.Millisecond)
		if _, err := io.WriteString(c, "tick\n"); err != nil {
			t.Fatalf("tick %d: %v", i, err)
		}
		if l, err := br.ReadString('\n'); err != nil || l != "tick\n" {
			t.Fatalf("tick %d: %q, %v", i, l, err)
		}
	}
	// ...and silence closes it.
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("read data from an idle tunnel")
	} else if time.Since(start) > 3*time.Second {
		t.Fatalf("the idle tunnel was not closed: %v", err)
	}

	// The slot is free again; a failed dial is a 502.
	var resp3 *http.Response
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp3, _, _ = rawConnect(t, proxy, "127.0.0.1:1"); resp3.StatusCode != http.StatusServiceUnavailable {
			break
		}
	}
	if resp3.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT to a closed port: %d, want 502", resp3.StatusCode)
	}
	if !strings.Contains(logs.String(), "too many open tunnels") || !strings.Contains(logs.String(), "egress dial failed") {
		t.Errorf("log:\n%s", logs)
	}

	// Close ends open tunnels.
	resp4, c4, br4 := rawConnect(t, proxy, echo)
	if resp4.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp4.StatusCode)
	}
	_ = p.Close()
	_ = c4.SetReadDeadline(time.Now().Add(5 * time.Second))
	start = time.Now()
	if _, err := br4.ReadByte(); err == nil || time.Since(start) > 3*time.Second {
		t.Errorf("a tunnel survived Close: %v", err)
	}
}
