package jobrun

import (
	"log/slog"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/shared/bus"
)

// DefaultNATSURL is where every binary looks for NATS unless told otherwise.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// AddConnectionFlags adds the flags every binary shares: where NATS and
// Redis are, and the JetStream parameters.
func AddConnectionFlags(fs *pflag.FlagSet) {
	fs.String("nats", DefaultNATSURL, "NATS server URL(s), comma-separated")
	fs.String("redis-url", "", "Redis URL for locks, cache and breakers (empty: JetStream KV)")
	fs.Int("replicas", 1, "replicas of JetStream streams and buckets (3 on a cluster)")
	fs.Duration("ack-wait", 30*time.Second, "time a job may go without a heartbeat before it is redelivered")
	fs.Int("max-deliver", 5, "deliveries of a job before it is dead-lettered")
	fs.Duration("artifact-ttl", 7*24*time.Hour, "how long bundles, patches and logs are kept in the object store")
}

// AddRunnerFlags adds the flags workers and gate runners share.
func AddRunnerFlags(fs *pflag.FlagSet) {
	AddConnectionFlags(fs)
	fs.StringSlice("pools", []string{"default"}, "pools to take jobs from")
	fs.Int("concurrency", 1, "jobs run at once")
	fs.Duration("drain-timeout", 5*time.Minute, "on SIGTERM, how long running jobs may finish before they are handed back")
	fs.String("data-dir", "./.supervisor-data", "directory for the mirror cache, workspaces and sandbox caches")
	fs.String("host-id", "", "this runner's identity in leases and reports (default hostname-pid)")
	fs.String("sandbox-path", "", "PATH inside the process sandbox (default /usr/local/bin:/usr/bin:/bin plus the host's Go)")
}

// BusConfig reads the JetStream parameters from v.
func BusConfig(v *viper.Viper) bus.Config {
	return bus.Config{
		Replicas:    v.GetInt("replicas"),
		AckWait:     v.GetDuration("ack-wait"),
		MaxDeliver:  v.GetInt("max-deliver"),
		ArtifactTTL: v.GetDuration("artifact-ttl"),
	}
}

// SettingsFrom reads runner settings from v.
func SettingsFrom(v *viper.Viper, log *slog.Logger) Settings {
	return Settings{
		NATSURL:     v.GetString("nats"),
		RedisURL:    v.GetString("redis-url"),
		DataDir:     v.GetString("data-dir"),
		SandboxPath: v.GetString("sandbox-path"),
		Host:        v.GetString("host-id"),
		Bus:         BusConfig(v),
		Log:         log,
	}
}
