package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Names of the session cookie, the form field carrying the CSRF token and
// the headers that carry the token itself.
const (
	sessionCookie  = "sup_session"
	operatorCookie = "sup_operator"
	csrfField      = "csrf"
	tokenHeader    = "X-Supervisor-Token"
)

// GenerateToken returns a new random token (32 bytes, hex) for --http-token.
func GenerateToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// IsLoopback reports whether a listen address (host:port) binds to a
// loopback address only: 127.0.0.0/8, ::1 or localhost. An empty host
// (every interface) is not loopback.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// derived is a value derived from the token, so that neither the session
// cookie nor the pages ever carry the token itself.
func derived(token, purpose string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(purpose))
	return hex.EncodeToString(m.Sum(nil))
}

// equal compares two secrets in constant time.
func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// bearer is the token a request carries in X-Supervisor-Token or
// Authorization: Bearer, "" if none.
func bearer(r *http.Request) string {
	if t := r.Header.Get(tokenHeader); t != "" {
		return t
	}
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// hasToken reports whether the request carries the token in a header.
func (s *Server) hasToken(r *http.Request) bool {
	t := bearer(r)
	return t != "" && equal(t, s.token)
}

// signedIn reports whether the request carries a valid session cookie.
func (s *Server) signedIn(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	return err == nil && equal(c.Value, s.session)
}

// mayRead reports whether the request may read pages: anyone when the
// dashboard listens on a loopback address and the request names a
// loopback host (a page of another site that rebinds its own name to
// 127.0.0.1 does not), otherwise only a signed-in browser or a request
// carrying the token.
func (s *Server) mayRead(r *http.Request) bool {
	return (s.openReads && loopbackHost(r.Host)) || s.signedIn(r) || s.hasToken(r)
}

// loopbackHost reports whether a Host header names this machine's
// loopback: localhost or a loopback IP, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// mayWrite reports whether a POST may change something: it carries the
// token in a header, or comes from a signed-in browser with the CSRF field
// of a form the dashboard rendered. A request whose Origin is another
// site's is refused either way.
func (s *Server) mayWrite(r *http.Request) bool {
	if r.Method != http.MethodPost || !sameOrigin(r) {
		return false
	}
	if s.hasToken(r) {
		return true
	}
	return s.signedIn(r) && equal(r.PostFormValue(csrfField), s.csrf)
}

// sameOrigin reports whether the request's Origin header, if any, names
// the host the request was sent to.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// setSession signs the browser in: a session cookie derived from the
// token, HttpOnly and SameSite=Strict.
func (s *Server) setSession(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.session, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
}
