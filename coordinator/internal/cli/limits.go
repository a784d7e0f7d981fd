package cli

import (
	"fmt"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// addLimitFlags adds the flags of the API's limits against abuse to a
// command that runs the coordinator.
func addLimitFlags(fs *pflag.FlagSet) {
	fs.Int("submit-rate", service.DefaultSubmitRate, "submissions one client (NATS connection) may make per --submit-window; more are refused with 429 (0: no limit)")
	fs.Duration("submit-window", service.DefaultSubmitWindow, "the window --submit-rate counts in")
	fs.String("max-request-bytes", jobrun.FormatBytes(service.DefaultMaxRequestBytes),
		"largest API request accepted; larger ones are refused with 413 (bytes, or e.g. 512KiB; 0: NATS's own limit only)")
	fs.Int("max-workflows-in-flight", service.DefaultMaxWorkflowsInFlight, "unfinished workflows the coordinator holds; a submission past it is refused with 503 (0: no limit)")
	fs.String("max-bundle-bytes", jobrun.FormatBytes(protocol.MaxBundleBytes),
		"largest repository bundle a submission may name; larger ones are refused with 413 (bytes, or e.g. 200MiB; at most 1GiB)")
	fs.Int("max-nodes-in-flight", service.DefaultMaxNodesInFlight, "nodes of unfinished workflows in all; a submission that would pass it is refused with 503 (0: no limit)")
}

// limits reads the flags addLimitFlags added.
func limits(v *viper.Viper) (service.Limits, error) {
	n, err := jobrun.ParseBytes(v.GetString("max-request-bytes"))
	if err != nil || n < 0 {
		return service.Limits{}, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--max-request-bytes %q: want a size, e.g. 1MiB", v.GetString("max-request-bytes"))}
	}
	l := service.Limits{SubmitRate: v.GetInt("submit-rate"), SubmitWindow: v.GetDuration("submit-window"), MaxRequestBytes: int(n),
		MaxWorkflowsInFlight: v.GetInt("max-workflows-in-flight"), MaxNodesInFlight: v.GetInt("max-nodes-in-flight")}
	b, err := jobrun.ParseBytes(v.GetString("max-bundle-bytes"))
	if err != nil || b <= 0 || b > protocol.MaxBundleBytes {
		return service.Limits{}, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--max-bundle-bytes %q: want a size up to %s, e.g. 200MiB",
			v.GetString("max-bundle-bytes"), jobrun.FormatBytes(protocol.MaxBundleBytes))}
	}
	l.MaxBundleBytes = b
	if l.SubmitRate < 0 || l.SubmitWindow < 0 || l.MaxWorkflowsInFlight < 0 || l.MaxNodesInFlight < 0 {
		return service.Limits{}, &ExitError{Code: ExitUsage, Err: fmt.Errorf("limits may not be negative (%s)", l)}
	}
	if l.SubmitRate > 0 && l.SubmitWindow == 0 {
		return service.Limits{}, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--submit-rate %d needs a positive --submit-window", l.SubmitRate)}
	}
	return l, nil
}
