package cli

import (
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/engine"
	"github.com/supervisorhq/supervisor/coordinator/internal/notify"
)

// addNotifyFlags adds the flags of the commands that run a coordinator and
// may notify.
func addNotifyFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringArray("notify-webhook", nil, "POST a JSON notification to this URL on escalations and humans' decisions (repeatable)")
	fs.StringArray("notify-command", nil, "run this argv (no shell) with the JSON notification on stdin: one value is split at white space, or repeat the flag once per argument")
	fs.Int("max-failures-per-hour", 10, "pause new agent rounds fleet-wide when more agent rounds fail within an hour (coordinator resume ends it; negative: never)")
}

// notifier builds the dispatcher the flags ask for, nil without any. The
// caller closes it.
func (e *env) notifier(cmd *cobra.Command) (*notify.Dispatcher, error) {
	hooks, _ := cmd.Flags().GetStringArray("notify-webhook")
	if len(hooks) == 0 {
		hooks = e.v.GetStringSlice("notify-webhook")
	}
	argv, _ := cmd.Flags().GetStringArray("notify-command")
	if len(argv) == 0 {
		argv = e.v.GetStringSlice("notify-command")
	}
	var sinks []notify.Sink
	for _, h := range hooks {
		u, err := url.Parse(h)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, exitf(ExitUsage, "--notify-webhook: want an http(s) URL, got %q", redactedURL(h))
		}
		sinks = append(sinks, notify.Webhook{URL: h})
	}
	if len(argv) == 1 {
		argv = strings.Fields(argv[0])
	}
	if len(argv) > 0 {
		sinks = append(sinks, notify.Command{Argv: argv})
	}
	if len(sinks) == 0 {
		return nil, nil
	}
	return notify.New(sinks, notify.Options{Log: e.log}), nil
}

// notifierOf is d as an engine.Notifier: nil (no notifications) without
// a dispatcher.
func notifierOf(d *notify.Dispatcher) engine.Notifier {
	if d == nil {
		return nil
	}
	return d
}

// redactedURL keeps a bad URL's scheme and host at most.
func redactedURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host + "/…"
	}
	return "(unparsable)"
}
