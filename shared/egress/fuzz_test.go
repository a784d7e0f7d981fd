package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// fuzzAllow is the allow-list the proxy fuzz targets run with.
var fuzzAllow = []string{"allowed.test:443", "*.ok.test:443", "plain.test:80", "10.0.0.1:8080"}

// FuzzConnect feeds any bytes to the proxy as a request, read the way its
// HTTP server reads one: it never panics, answers every request it does
// not tunnel with a status, and never dials an address the allow-list
// refuses, whatever the CONNECT target or absolute URL looks like (case,
// trailing dots, IPv6 brackets, zones, ports with signs or zeros, user
// info, a Host header disagreeing with the target). Its dialer records
// and refuses every dial, so nothing leaves the machine.
func FuzzConnect(f *testing.F) {
	for _, s := range []string{
		"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n",
		"CONNECT ALLOWED.TEST.:443 HTTP/1.1\r\n\r\n",
		"CONNECT evil.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n",
		"CONNECT a.ok.test:443 HTTP/1.1\r\n\r\n",
		"CONNECT ok.test:443 HTTP/1.1\r\n\r\n",
		"CONNECT allowed.test:0443 HTTP/1.1\r\n\r\n",
		"CONNECT allowed.test:+443 HTTP/1.1\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
		"CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n",
		"CONNECT 10.0.0.1:8080 HTTP/1.1\r\n\r\n",
		"CONNECT user@allowed.test:443 HTTP/1.1\r\n\r\n",
		"CONNECT /path HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n",
		"GET http://plain.test/x HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"GET http://plain.test:80@evil.test/ HTTP/1.1\r\n\r\n",
		"GET http://evil.test/ HTTP/1.1\r\nHost: plain.test\r\n\r\n",
		"GET /relative HTTP/1.1\r\nHost: plain.test\r\n\r\n",
		"GET https://allowed.test/ HTTP/1.1\r\n\r\n",
		"GET http://plain.test/x HTTP/1.1\r\n+ 00:0\n\r\n",
	} {
		f.Add([]byte(s))
	}
	var mu sync.Mutex
	var dialed []string
	p, err := New(Options{
		Allow: fuzzAllow,
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
			mu.Lock()
			dialed = append(dialed, addr)
			mu.Unlock()
			return nil, errors.New("fuzz: no network")
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	allow, err := ParseAllowList(fuzzAllow)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil || !serverAccepts(r) {
			return // the server answers 400 before the proxy sees it
		}
		r.RemoteAddr = "192.0.2.1:1234"
		mu.Lock()
		dialed = dialed[:0]
		mu.Unlock()
		rec := hijackRefused{httptest.NewRecorder()}
		p.ServeHTTP(rec, r)
		w := rec.ResponseRecorder
		if w.Code < 400 {
			t.Fatalf("%q: status %d without a tunnel or an upstream", raw, w.Code)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, addr := range dialed {
			host, port, err := net.SplitHostPort(addr)
			if err != nil || !allow.Allows(host, port) {
				t.Fatalf("%q: dialed %q, which the allow-list refuses", raw, addr)
			}
		}
		if (len(dialed) > 0) != (w.Code == http.StatusBadGateway) {
			t.Fatalf("%q: dialed %q and answered %d", raw, dialed, w.Code)
		}
		if len(dialed) > 0 && w.Code != http.StatusBadGateway && w.Code != http.StatusInternalServerError {
			t.Fatalf("%q: dialed %q but answered %d", raw, dialed, w.Code)
		}
	})
}

// serverAccepts reports whether net/http's server hands r to a handler:
// besides what http.ReadRequest checks, the server refuses a header whose
// name or value is not valid HTTP with a 400 of its own.
func serverAccepts(r *http.Request) bool {
	for k, vv := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}

// FuzzAllowList checks the allow-list parser on any entry: it never
// panics, never accepts an entry with a wildcard anywhere but a leading
// "*.", and what it accepts is a fixed point: the normalized entries parse
// again to the same list, which allows its own plain entries and, for a
// wildcard, a name under the domain but never the bare domain.
func FuzzAllowList(f *testing.F) {
	for _, s := range []string{"api.example.com:443", "*.example.com:443", "EXAMPLE.com.:80",
		"[::1]:8080", "a*b.com:443", "*.:443", "host:0", "host:65536", "host:+1", ":443", "host", "*.*.x:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, entry string) {
		a, err := ParseAllowList([]string{entry})
		if err != nil {
			return
		}
		entries := a.Entries()
		for _, e := range entries {
			host, port, err := net.SplitHostPort(e)
			if err != nil {
				t.Fatalf("%q: entry %q is not host:port", entry, e)
			}
			if i := strings.LastIndex(host, "*"); i > 0 || (i == 0 && !strings.HasPrefix(host, "*.")) {
				t.Fatalf("%q: accepted wildcard %q", entry, host)
			}
			if strings.HasPrefix(host, "*.") {
				if a.Allows(host[2:], port) {
					t.Fatalf("%q: wildcard allows the bare domain %q", entry, host[2:])
				}
				if !a.Allows("x"+host[1:], port) {
					t.Fatalf("%q: wildcard does not allow %q", entry, "x"+host[1:])
				}
			} else if !a.Allows(host, port) {
				t.Fatalf("%q: does not allow its own entry %q", entry, e)
			}
		}
		b, err := ParseAllowList(entries)
		if err != nil {
			t.Fatalf("%q: normalized %q does not parse: %v", entry, entries, err)
		}
		if got := b.Entries(); strings.Join(got, "\n") != strings.Join(entries, "\n") {
			t.Fatalf("%q: entries %q parse to %q", entry, entries, got)
		}
	})
}

// hijackRefused is a response recorder that can be hijacked, as a
// server's connection can, so CONNECT goes as far as dialing; the hijack
// itself is never reached, the dial failing first.
type hijackRefused struct{ *httptest.ResponseRecorder }

func (hijackRefused) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("fuzz: no hijack")
}
