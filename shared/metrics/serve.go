package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// FlagName is the setting that says where /metrics is served
// (SUPERVISOR_METRICS_LISTEN in the environment).
const FlagName = "metrics-listen"

// PprofFlagName is the setting that adds Go's profiles (net/http/pprof) at
// PprofPath on the metrics listener (SUPERVISOR_PPROF).
const PprofFlagName = "pprof"

// PprofPath is where the profiles are served when --pprof is on.
const PprofPath = "/debug/pprof/"

// Off, as the listen address, serves no metrics.
const Off = "off"

// Default listen addresses, one port per binary so that a host running all
// three serves each.
const (
	DefaultCoordinator = ":9101"
	DefaultWorker      = ":9102"
	DefaultGateRunner  = ":9103"
	// DefaultDev is coordinator dev's: loopback only, as dev's NATS.
	DefaultDev = "127.0.0.1:9101"
)

// Path is where the exposition is served.
const Path = "/metrics"

// AddFlag adds --metrics-listen with the binary's default (Off for none),
// and --pprof.
func AddFlag(fs *pflag.FlagSet, def string) {
	fs.String(FlagName, def, `address to serve Prometheus metrics on at `+Path+` (host:port, ":port" for every interface, "off" for none); a busy default port is only a warning`)
	fs.Bool(PprofFlagName, false, `also serve Go's CPU, heap, goroutine and other profiles at `+PprofPath+` on the metrics address (no effect with --`+FlagName+` off); anyone who reaches that address can read them`)
}

// Server serves Registry over HTTP.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Addr is the address the server listens on ("" for a nil Server).
func (s *Server) Addr() string {
	if s == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops serving; a nil Server (metrics off) has nothing to stop.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// ErrListen is in the chain of Start's error when the address given
// explicitly cannot be listened on.
var ErrListen = errors.New("cannot serve metrics")

// Start serves Registry on addr at Path until Close. With addr Off or
// empty it serves nothing and returns nil. When the address cannot be
// listened on (a port in use), explicit decides: an address the operator
// gave is an error (ErrListen), the binary's default only a warning on
// log, and Start returns nil.
func Start(addr string, explicit bool, log *slog.Logger) (*Server, error) {
	return start(addr, explicit, false, log)
}

// start is Start, serving the profiles too when withPprof.
func start(addr string, explicit, withPprof bool, log *slog.Logger) (*Server, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" || strings.EqualFold(addr, Off) {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if explicit {
			return nil, fmt.Errorf("%w on --%s %s: %w", ErrListen, FlagName, addr, err)
		}
		log.Warn("metrics not served: the default metrics address is not available; set --metrics-listen to another address, or off",
			"addr", addr, "err", err)
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.Handle(Path, Handler())
	if withPprof {
		// Not /debug/pprof/cmdline: a command line may hold a secret.
		mux.HandleFunc(PprofPath, pprof.Index)
		mux.HandleFunc(PprofPath+"profile", pprof.Profile)
		mux.HandleFunc(PprofPath+"symbol", pprof.Symbol)
		mux.HandleFunc(PprofPath+"trace", pprof.Trace)
		log.Info("serving Go profiles", "url", "http://"+ln.Addr().String()+PprofPath)
	}
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "addr", s.Addr(), "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+s.Addr()+Path)
	return s, nil
}

// StartFrom starts the server --metrics-listen in v asks for (explicit when
// set by flag, environment or config file rather than defaulted), with the
// profiles if --pprof is on.
func StartFrom(v *viper.Viper, log *slog.Logger) (*Server, error) {
	return start(v.GetString(FlagName), v.IsSet(FlagName), v.GetBool(PprofFlagName), log)
}

// Handler serves Registry's exposition; a collector that fails (JetStream
// unreachable) is reported in the response while the rest is served.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
