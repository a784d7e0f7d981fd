// Package cli is the coordinator binary's command line: the service
// (serve), the embedded default (dev, demo) and the user's commands
// (submit, status, watch, logs, cancel, gate, the inbox and its decisions,
// breakers).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/natsauth"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// Exit codes. Scripts can rely on them.
const (
	ExitOK        = 0
	ExitFault     = 1 // anything else went wrong
	ExitFailed    = 2 // the workflow failed
	ExitCancelled = 3 // the workflow was cancelled
	ExitRunning   = 4 // the workflow has not finished (status)
	// ExitNeedsAttention: the workflow waits for a human (status, and
	// submit --wait and watch once nothing can move without one).
	ExitNeedsAttention = 5
	ExitUsage          = 64 // bad command line
	ExitInvalid        = 65 // the workflow file is invalid
	ExitUnavailable    = 69 // NATS or the coordinator cannot be reached
	// ExitRefused: the coordinator refused the request under one of its
	// limits (a 413, 429 or 503: size, rate, work in flight); the message
	// names the limit and its flag.
	ExitRefused = 75
	// ExitDenied: NATS refused the credentials (--nats-nkey), or denied
	// the request to their role (a cli key asking to approve, say).
	ExitDenied = 77
)

// ExitError carries an exit code with an error.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

func exitf(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// Main runs the CLI with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	flushTracing()
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(stderr, "coordinator:", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, "coordinator:", err)
	return ExitUsage
}

// NewRoot builds the command tree.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "coordinator",
		Short: "Supervisor's coordinator and the command line to drive it",
		Long: `coordinator runs Supervisor's coordinator service and is the command line users
drive it with. Settings come from flags, then SUPERVISOR_* environment variables
(--nats is SUPERVISOR_NATS), then the --config file, then defaults.

Exit codes: 0 succeeded; 1 error; 2 workflow failed; 3 workflow cancelled;
4 workflow still running; 5 needs attention; 6 merge failed; 64 usage;
65 invalid workflow; 69 unreachable; 75 refused under a limit (request size, submission rate, work
in flight); 77 NATS refused the credentials or denied the request to their role.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	config.AddConfigFlag(root.PersistentFlags())
	root.PersistentFlags().String("nats", jobrun.DefaultNATSURL, "NATS server URL(s), comma-separated")
	jobrun.AddNATSTLSFlags(root.PersistentFlags())
	jobrun.AddNkeyFlag(root.PersistentFlags())
	root.PersistentFlags().Duration("timeout", 30*time.Second, "how long to wait for NATS and the coordinator to answer")
	addGateSourceFlags(root.PersistentFlags())
	addContextFlags(root.PersistentFlags())
	addConfigSourceFlags(root.PersistentFlags())
	telemetry.AddFlags(root.PersistentFlags())
	root.AddCommand(newServe(), newDev(), newDemo(), newSubmit(), newPlan(), newRoles(), newTemplates(), newStatus(), newWatch(), newLogs(), newCancel(), newGate(),
		newInbox(), newShow(), newApprove(), newReject(), newRetry(), newBreakers(), newResume(), newMerge(), newFleet(),
		newCreds(), newTLS(), newBench())
	root.AddCommand(newContext())
	return root
}

// env is what a client command needs, loaded from its settings.
type env struct {
	// onDenied, if set, is told when NATS denies a request to the
	// client's role (callAPI ends the call at once).
	onDenied func(error)
	v        *viper.Viper
	log      *slog.Logger
	out      io.Writer
	errOut   io.Writer
}

func load(cmd *cobra.Command, component string) (*env, error) {
	v, err := config.Load(cmd)
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	log, err := config.Logger(v, component)
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	if err := setupTracing(v, component, log); err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	return &env{v: v, log: log, out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr()}, nil
}

// connect dials NATS for a client command, giving up after --timeout.
func (e *env) connect(ctx context.Context) (*nats.Conn, *api.Client, error) {
	cctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc, err := bus.Connect(cctx, e.v.GetString("nats"), "supervisor-cli", quiet, e.nkey(""), bus.WithTLS(jobrun.NATSTLS(e.v)),
		bus.OnDenied(func(err error) {
			if e.onDenied != nil {
				e.onDenied(err)
			}
		}))
	if err != nil {
		return nil, nil, connectErr(err)
	}
	return nc, &api.Client{NC: nc}, nil
}

// nkey is the connection option of --nats-nkey, for role ("" when the
// cli and operator roles both do).
func (e *env) nkey(role natsauth.Role) bus.ConnectOption {
	return bus.WithNkey(e.v.GetString("nats-nkey"), role)
}

// connectErr maps a failure to connect to its exit code: credentials
// NATS refused (or an unreadable key file) are not "unreachable".
func connectErr(err error) error {
	switch {
	case errors.Is(err, bus.ErrRefused):
		return &ExitError{Code: ExitDenied, Err: err}
	case errors.Is(err, bus.ErrBadNkey):
		return &ExitError{Code: ExitUsage, Err: err}
	}
	return &ExitError{Code: ExitUnavailable, Err: err}
}

// apiCall is a client command's body: one or more API calls made within
// --timeout, with the command's settings at hand.
type apiCall func(ctx context.Context, e *env, client *api.Client, args []string) error

// clientRunE loads a client command's settings, connects to NATS and runs
// call with a context bounded by --timeout and cancelled on SIGINT/SIGTERM.
func clientRunE(component string, call apiCall) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		e, err := load(cmd, component)
		if err != nil {
			return err
		}
		return e.callAPI(func(ctx context.Context, client *api.Client) error { return call(ctx, e, client, args) })
	}
}

// callAPI connects to NATS and runs call with a context bounded by
// --timeout and cancelled on SIGINT/SIGTERM.
func (e *env) callAPI(call func(ctx context.Context, client *api.Client) error) error {
	ctx, stop := signalContext()
	defer stop()
	ctx, deny := context.WithCancelCause(ctx)
	defer deny(nil)
	e.onDenied = deny
	nc, client, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
	defer cancel()
	return deniedErr(nc, call(rctx, client))
}

// deniedErr replaces an error of a request NATS denied to the client's
// role (it went unanswered) with one naming the subject and the role.
func deniedErr(nc *nats.Conn, err error) error {
	if err == nil {
		return nil
	}
	if d := bus.Denied(nc); d != nil {
		return &ExitError{Code: ExitDenied, Err: d}
	}
	return err
}

// apiErr maps API errors to exit codes.
func apiErr(err error) error {
	if err == nil {
		return nil
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		code := ExitFault
		switch ae.Code {
		case api.CodeInvalid:
			code = ExitInvalid
		case api.CodeTooLarge, api.CodeTooMany, api.CodeUnavailable:
			code = ExitRefused
		}
		return &ExitError{Code: code, Err: err}
	}
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return &ExitError{Code: ExitUnavailable, Err: err}
	}
	return &ExitError{Code: ExitFault, Err: err}
}

// signalContext is cancelled on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return notifyContext(context.Background())
}

func notifyContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
}
