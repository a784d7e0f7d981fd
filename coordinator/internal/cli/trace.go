package cli

import (
	"context"
	"io"
	"log/slog"
	"sync"

	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/shared/jobrun"
)

// SpanCLISubmit names the span of `coordinator submit`: the root of the
// workflow's trace when the CLI exports spans.
const SpanCLISubmit = "cli submit"

// tracing holds the flushes of the tracer providers load installed; Main
// runs them before the process exits.
var tracing struct {
	mu    sync.Mutex
	flush []func()
}

// serviceName is the service.name of a command's spans: the service
// commands name themselves, every client command is the CLI.
func serviceName(component string) string {
	switch component {
	case "coordinator", "dev", "demo":
		return "supervisor-" + component
	}
	return "supervisor-cli"
}

// setupTracing installs the tracer provider the --trace-* settings ask for
// (telemetry.Setup). Only the service commands log that tracing is on.
func setupTracing(v *viper.Viper, component string, log *slog.Logger) error {
	if serviceName(component) == "supervisor-cli" {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	flush, err := jobrun.SetupTracing(context.Background(), v, serviceName(component), log)
	if err != nil {
		return err
	}
	tracing.mu.Lock()
	tracing.flush = append(tracing.flush, flush)
	tracing.mu.Unlock()
	return nil
}

// flushTracing flushes and stops every tracer provider set up so far.
func flushTracing() {
	tracing.mu.Lock()
	flush := tracing.flush
	tracing.flush = nil
	tracing.mu.Unlock()
	for _, f := range flush {
		f()
	}
}
