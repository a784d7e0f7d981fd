// Package config binds a cobra command's flags to viper, so every binary
// reads its settings the same way: flags > SUPERVISOR_* environment >
// --config file > defaults.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// EnvPrefix is the prefix of every environment variable the binaries read:
// flag --redis-url is SUPERVISOR_REDIS_URL.
const EnvPrefix = "SUPERVISOR"

// ChildEnv is the environment for a Supervisor binary this process starts
// as a component of its own (the bench's runners, the end-to-end tests'
// fleet): this process's environment without its SUPERVISOR_* settings,
// which would configure the child too (point it at another state store,
// say), or GIT_* variables, which would redirect the child's git.
func ChildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvPrefix+"_") && !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return env
}

// Load returns a viper instance for cmd: its flags (and inherited ones)
// bound, SUPERVISOR_* variables read, and the file named by --config (if
// the flag exists and is set) merged underneath. Keys are flag names.
func Load(cmd *cobra.Command) (*viper.Viper, error) {
	v := viper.New()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	v.AutomaticEnv()
	var bindErr error
	bind := func(f *pflag.Flag) {
		if err := v.BindPFlag(f.Name, f); err != nil && bindErr == nil {
			bindErr = err
		}
	}
	cmd.Flags().VisitAll(bind)
	cmd.InheritedFlags().VisitAll(bind)
	if bindErr != nil {
		return nil, fmt.Errorf("config: bind flags: %w", bindErr)
	}
	file := v.GetString("config")
	if file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			var nf viper.ConfigFileNotFoundError
			if errors.As(err, &nf) || os.IsNotExist(err) {
				return nil, fmt.Errorf("config file %s: not found", file)
			}
			return nil, fmt.Errorf("config file %s: %w", file, err)
		}
	}
	return v, nil
}

// AddConfigFlag adds the --config and --log-level/--log-format flags every
// binary has.
func AddConfigFlag(fs *pflag.FlagSet) {
	fs.String("config", "", "config file (YAML, TOML or JSON); flags and SUPERVISOR_* env override it")
	fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.String("log-format", "text", "log format: text or json")
}

// Logger builds the slog logger the --log-level and --log-format settings
// ask for; a record logged with a context that carries a span gets its
// trace_id and span_id (telemetry.Handler).
func Logger(v *viper.Viper, component string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(v.GetString("log-level"))); err != nil {
		return nil, fmt.Errorf("log-level %q: %w", v.GetString("log-level"), err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch v.GetString("log-format") {
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	case "text", "":
		h = slog.NewTextHandler(os.Stderr, opts)
	default:
		return nil, fmt.Errorf("log-format %q: want text or json", v.GetString("log-format"))
	}
	// Records logged with a span's context carry its trace_id and span_id.
	return slog.New(telemetry.NewHandler(h)).With("component", component), nil
}
