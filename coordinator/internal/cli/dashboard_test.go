package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/dashboard"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/shared/config"
)

// dashboardEnv is a command with the dashboard's flags set to args, its
// output captured.
func dashboardEnv(t *testing.T, def string, args ...string) (*env, *cobra.Command, *bytes.Buffer) {
	t.Helper()
	cmd := &cobra.Command{Use: "x"}
	addDashboardFlags(cmd, def, true)
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	v, err := config.Load(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	return &env{v: v, out: &out, errOut: io.Discard, log: slog.New(slog.NewTextHandler(io.Discard, nil))}, cmd, &out
}

// The dashboard's wiring: dev's generated token is printed with the
// sign-in address, which signs a browser in; serve refuses to start one
// without a token; a default address in use falls back to a free port, an
// explicit one is an error; off starts nothing.
func TestStartDashboard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, err := fleet.Start(ctx, fleet.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NoRunners: true,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	e, cmd, out := dashboardEnv(t, dashboard.DefaultListen, "--http-listen=127.0.0.1:0")
	stop, err := e.startDashboard(ctx, cmd, f.URL(), nil, dashboard.DefaultListen, true)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^dashboard: (http://127\.0\.0\.1:\d+/) \(to act, sign in: (http://\S+/login\?token=[0-9a-f]{64})\)\n$`).FindStringSubmatch(out.String())
	if m == nil {
		stop()
		t.Fatalf("dev printed %q", out.String())
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(m[2])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
		t.Errorf("the printed sign-in address: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	stop()
	if _, err := http.Get(m[1]); err == nil {
		t.Errorf("the dashboard still answers after stop")
	}

	e, cmd, _ = dashboardEnv(t, "", "--http-listen=127.0.0.1:0")
	if _, err := e.startDashboard(ctx, cmd, f.URL(), nil, "", false); err == nil || !strings.Contains(err.Error(), "needs --http-token") {
		t.Errorf("serve without a token: %v", err)
	}
	e, _, _ = dashboardEnv(t, "", "--http-listen=127.0.0.1:0", "--http-token=short")
	if err := e.checkDashboardFlags(false); !errors.Is(err, dashboard.ErrNoToken) {
		t.Errorf("a short token: %v, want ErrNoToken", err)
	}
	e, cmd, out = dashboardEnv(t, "", "--http-listen=127.0.0.1:0", "--http-token="+strings.Repeat("t", 20))
	stop, err = e.startDashboard(ctx, cmd, f.URL(), nil, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "sign in with --http-token") || strings.Contains(s, strings.Repeat("t", 20)) {
		t.Errorf("serve printed %q: want the address, not the token", s)
	}
	stop()

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.Addr().String()
	e, cmd, out = dashboardEnv(t, taken)
	stop, err = e.startDashboard(ctx, cmd, f.URL(), nil, taken, true)
	if err != nil {
		t.Fatalf("the default address in use: %v, want another port", err)
	}
	if s := out.String(); !strings.HasPrefix(s, "dashboard: http://127.0.0.1:") || strings.Contains(s, taken) {
		t.Errorf("with the default address in use, printed %q", s)
	}
	stop()
	e, cmd, _ = dashboardEnv(t, dashboard.DefaultListen, "--http-listen="+taken)
	var exit *ExitError
	if _, err := e.startDashboard(ctx, cmd, f.URL(), nil, dashboard.DefaultListen, true); !errors.As(err, &exit) || exit.Code != ExitUsage {
		t.Errorf("an explicit address in use: %v, want a usage error", err)
	}
	e, cmd, out = dashboardEnv(t, dashboard.DefaultListen, "--http-listen=off")
	stop, err = e.startDashboard(ctx, cmd, f.URL(), nil, dashboard.DefaultListen, true)
	if err != nil || out.Len() != 0 {
		t.Errorf("--http-listen=off: %v, printed %q", err, out.String())
	}
	stop()
}
