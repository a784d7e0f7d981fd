// Package bus sets up and uses Supervisor's JetStream resources: it dials
// NATS with back-off, creates or updates the streams, consumers and object
// stores the fleet needs, publishes jobs, reports and events with
// de-duplication ids, and runs the pull loop with heartbeats that workers
// and gate runners share.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrUnreachable means NATS could not be reached before the context ended.
var ErrUnreachable = errors.New("bus: NATS unreachable")

// Backoff is the reconnect schedule used while NATS cannot be reached: it
// starts at Initial, doubles, and is capped at Max.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// DefaultBackoff is 250 ms doubling to 10 s.
var DefaultBackoff = Backoff{Initial: 250 * time.Millisecond, Max: 10 * time.Second}

// Next returns the delay after d.
func (b Backoff) Next(d time.Duration) time.Duration {
	if d <= 0 {
		return b.Initial
	}
	d *= 2
	if d > b.Max {
		d = b.Max
	}
	return d
}

// Connect dials the NATS server at url, retrying with back-off and logging
// each failure with the URL, until it connects or ctx ends. Once connected
// the client reconnects by itself forever; disconnections are logged.
func Connect(ctx context.Context, serverURL, name string, log *slog.Logger) (*nats.Conn, error) {
	if log == nil {
		log = slog.Default()
	}
	shown := RedactURL(serverURL)
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", "url", shown, "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("reconnected to NATS", "url", RedactURL(c.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("NATS async error", "url", shown, "subject", subj, "err", err)
		}),
	}
	delay := time.Duration(0)
	for attempt := 1; ; attempt++ {
		nc, err := nats.Connect(serverURL, opts...)
		if err == nil {
			if attempt > 1 {
				log.Info("connected to NATS", "url", shown, "attempts", attempt)
			}
			return nc, nil
		}
		delay = DefaultBackoff.Next(delay)
		log.Warn("cannot reach NATS; retrying", "url", shown, "attempt", attempt, "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w at %s after %d attempts: %v", ErrUnreachable, shown, attempt, err)
		case <-time.After(delay):
		}
	}
}

// RedactURL hides any password or token in a server URL for logs and errors.
// raw may be a comma-separated list of URLs, as nats.Connect accepts; each
// is redacted. A URL that does not parse has its user information cut out by
// hand rather than being shown as is.
func RedactURL(raw string) string {
	if !strings.Contains(raw, ",") {
		return redactOne(raw)
	}
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = redactOne(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactOne(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// e.g. a password with '#', '/' or '%' in it: cut the userinfo
		// (everything before the last '@' of the authority) by hand.
		prefix, rest := "", raw
		if i := strings.Index(raw, "://"); i >= 0 {
			prefix, rest = raw[:i+3], raw[i+3:]
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			return raw
		}
		if user, _, has := strings.Cut(rest[:at], ":"); has {
			return prefix + user + ":xxxxx" + rest[at:]
		}
		return prefix + "xxxxx" + rest[at:]
	}
	if u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	} else {
		u.User = url.User("xxxxx")
	}
	return u.String()
}
