package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/dashboard"
	"github.com/supervisorhq/supervisor/shared/bus"
)

// addDashboardFlags adds --http-listen (default def: "" is off) and
// --http-token to a command that can serve the web dashboard; generate
// says whether the command makes up a token when none is given.
func addDashboardFlags(cmd *cobra.Command, def string, generate bool) {
	fs := cmd.Flags()
	fs.String("http-listen", def, `address the web dashboard listens on ("" or "off": no dashboard); reads are open without the token only on a loopback address`)
	tokenHelp := "token the dashboard's actions (and, off loopback, its pages) need, at least 16 characters; required with --http-listen (env SUPERVISOR_HTTP_TOKEN)"
	if generate {
		tokenHelp = "token the dashboard's actions (and, off loopback, its pages) need, at least 16 characters; generated and printed when empty (env SUPERVISOR_HTTP_TOKEN)"
	}
	fs.String("http-token", "", tokenHelp)
}

// checkDashboardFlags refuses, before anything starts, a dashboard that
// would have no token (when none is generated) or too short a one.
func (e *env) checkDashboardFlags(generate bool) error {
	listen := strings.TrimSpace(e.v.GetString("http-listen"))
	if listen == "" || listen == "off" {
		return nil
	}
	token := e.v.GetString("http-token")
	if token == "" && !generate {
		return exitf(ExitUsage, "--http-listen %s needs --http-token (or SUPERVISOR_HTTP_TOKEN): the dashboard's actions are refused without one", listen)
	}
	if token != "" && len(token) < dashboard.MinTokenLength {
		return &ExitError{Code: ExitUsage, Err: dashboard.ErrNoToken}
	}
	return nil
}

// startDashboard serves the dashboard when --http-listen is set, talking
// to the fleet through nc (nil: a connection of its own to natsURL), and
// prints its address. Without --http-token, generate makes one and prints
// it (dev, demo); otherwise a missing token is a usage error (serve, whose
// output may end up in a log). A default address in use is a warning and another
// port is taken; an explicit one in use is an error. The returned stop
// function closes what was started.
func (e *env) startDashboard(ctx context.Context, cmd *cobra.Command, natsURL string, nc *nats.Conn, def string, generate bool, opts ...bus.ConnectOption) (func(), error) {
	listen := strings.TrimSpace(e.v.GetString("http-listen"))
	if listen == "" || listen == "off" {
		return func() {}, nil
	}
	explicit := cmd.Flags().Changed("http-listen") || listen != def
	token := e.v.GetString("http-token")
	generated := false
	if err := e.checkDashboardFlags(generate); err != nil {
		return nil, err
	}
	if token == "" {
		var err error
		if token, err = dashboard.GenerateToken(); err != nil {
			return nil, err
		}
		generated = true
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil && !explicit && errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(listen)
		e.log.Warn("the dashboard's default address is in use; taking another port", "address", listen)
		ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--http-listen %s: %w", listen, err)}
	}
	var own *nats.Conn
	if nc == nil {
		if own, err = bus.Connect(ctx, natsURL, "supervisor-dashboard", e.log, append([]bus.ConnectOption{e.nkey("")}, opts...)...); err != nil {
			_ = ln.Close()
			return nil, connectErr(err)
		}
		nc = own
	}
	srv, err := dashboard.New(dashboard.Options{NC: nc, Listen: ln.Addr().String(), Token: token, Log: e.log})
	if err != nil {
		_ = ln.Close()
		if own != nil {
			own.Close()
		}
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	run := srv.Listen(ln)
	url := run.URL()
	if generated {
		fmt.Fprintf(e.out, "dashboard: %s (to act, sign in: %slogin?token=%s)\n", url, url, token)
	} else {
		fmt.Fprintf(e.out, "dashboard: %s (to act, sign in with --http-token)\n", url)
	}
	return func() {
		if err := run.Close(); err != nil {
			e.log.Warn("dashboard stopped with an error", "err", err)
		}
		if own != nil {
			own.Close()
		}
	}, nil
}
