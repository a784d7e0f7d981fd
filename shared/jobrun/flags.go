package jobrun

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/egress"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/state"
)

// DefaultNATSURL is where every binary looks for NATS unless told otherwise.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// AddConnectionFlags adds the flags every runner shares: where NATS and
// Redis are, their TLS and password settings, and the JetStream
// parameters.
func AddConnectionFlags(fs *pflag.FlagSet) {
	fs.String("nats", DefaultNATSURL, "NATS server URL(s), comma-separated")
	AddNkeyFlag(fs)
	fs.String("redis-url", "", "Redis URL (redis:// or rediss://, with the ACL user: rediss://worker@redis:6380/0) for locks, cache and breakers (empty: JetStream KV)")
	AddNATSTLSFlags(fs)
	AddRedisSecurityFlags(fs)
	fs.Int("replicas", 1, "replicas of JetStream streams and buckets (3 on a cluster)")
	fs.Duration("ack-wait", 30*time.Second, "time a job may go without a heartbeat before it is redelivered")
	fs.Int("max-deliver", 5, "deliveries of a job before it is dead-lettered")
	fs.Duration("artifact-ttl", 7*24*time.Hour, "how long bundles, patches and logs are kept in the object store")
}

// AddNkeyFlag adds --nats-nkey, the file of the binary's NATS credentials.
func AddNkeyFlag(fs *pflag.FlagSet) {
	fs.String("nats-nkey", "", "file of this program's NATS nkey (its role's file of `coordinator creds init DIR`; empty: no credentials)")
}

// AddRunnerFlags adds the flags workers and gate runners share.
func AddRunnerFlags(fs *pflag.FlagSet) {
	AddConnectionFlags(fs)
	fs.StringSlice("pools", []string{"default"}, "pools to take jobs from")
	fs.Int("concurrency", 1, "jobs run at once")
	fs.Duration("drain-timeout", 5*time.Minute, "on SIGTERM, how long running jobs may finish before they are handed back")
	fs.String("data-dir", "./.supervisor-data", "directory for the mirror cache, workspaces and sandbox caches (two runners on one host need different ones)")
	fs.String("host-id", "", "this runner's identity in leases, reports and its sandbox containers; stable across restarts (default hostname-<hash of --data-dir>)")
	fs.String("sandbox-path", "", "PATH inside the process sandbox (default /usr/local/bin:/usr/bin:/bin plus the host's Go)")
	fs.String("sandbox-process-user", ProcessUserAuto, "user the process sandbox runs commands as: auto (65534:65534 when the runner is root and that user can enter --data-dir, else the runner's own, with a warning), off (the runner's own), uid:gid, uid or a user name (needs a root runner)")
	AddBreakerFlags(fs)
}

// AddBreakerFlags adds the circuit breakers' policy flags. Runners use the
// policy to open and close the breakers, the coordinator to show them;
// every binary of a fleet should be given the same.
func AddBreakerFlags(fs *pflag.FlagSet) {
	d := state.DefaultBreakerPolicy()
	fs.Int("breaker-failures", d.Failures, "failures of one scope (agent, gate or repository) within --breaker-window that open its circuit breaker")
	fs.Duration("breaker-window", d.Window, "how far back a circuit breaker counts failures")
	fs.Duration("breaker-cool-down", d.CoolDown, "how long an open circuit breaker holds jobs back before one job probes the scope")
}

// BreakerPolicy reads the circuit breakers' policy (AddBreakerFlags) from v.
func BreakerPolicy(v *viper.Viper) (state.BreakerPolicy, error) {
	p := state.BreakerPolicy{Failures: v.GetInt("breaker-failures"), Window: v.GetDuration("breaker-window"),
		CoolDown: v.GetDuration("breaker-cool-down")}
	if p.Failures <= 0 || p.Window <= 0 || p.CoolDown <= 0 {
		return state.BreakerPolicy{}, fmt.Errorf("--breaker-failures, --breaker-window and --breaker-cool-down must be positive")
	}
	return p, nil
}

// Profile is what differs between runner binaries' sandbox settings.
type Profile struct {
	// Resources are the defaults of --sandbox-memory, --sandbox-cpus and
	// --sandbox-pids (zero fields: the sandbox package's defaults).
	Resources sandbox.Resources
	// Egress adds --egress-allow, --egress-proxy-port and
	// --egress-network: the binary's commands (agents) reach the network
	// through the egress proxy.
	Egress bool
	// Prepare, if set, completes the settings from the binary's own flags
	// before Setup (the worker: labels and GPUs).
	Prepare func(v *viper.Viper, s *Settings) error
	// MetricsListen is the default of --metrics-listen ("": off).
	MetricsListen string
}

// AddSandboxFlags adds the sandbox flags, with p's defaults.
func AddSandboxFlags(fs *pflag.FlagSet, p Profile) {
	res := p.Resources
	if res.MemoryBytes <= 0 {
		res.MemoryBytes = sandbox.DefaultDockerMemory
	}
	if res.CPUs <= 0 {
		res.CPUs = sandbox.DefaultDockerCPUs
	}
	if res.Pids <= 0 {
		res.Pids = sandbox.DefaultDockerPids
	}
	fs.String("sandbox", SandboxAuto, "sandbox: auto (Docker if the engine answers and has the image, else the process sandbox with a loud warning), docker (refuse to start without it), process (no isolation)")
	fs.String("sandbox-image", DefaultSandboxImage, "default image of the Docker sandbox (built on this host by make images; never pulled)")
	fs.String("sandbox-user", "", "uid:gid commands run as in the Docker sandbox (default: the workspace's owner, or 65534:65534 when that is root; 0:0 for a rootless engine)")
	fs.String("sandbox-container-path", "", "PATH inside Docker sandbox containers (default /usr/local/bin:/usr/bin:/bin)")
	fs.String("sandbox-memory", FormatBytes(res.MemoryBytes), "memory limit of a Docker sandbox container (bytes, or with a unit: 512MiB, 4GiB, 4g)")
	fs.Float64("sandbox-cpus", res.CPUs, "CPU limit of a Docker sandbox container")
	fs.Int64("sandbox-pids", res.Pids, "pids limit of a Docker sandbox container")
	fs.Bool("sandbox-prestart", true, "start each workspace's next Docker sandbox container ahead of its job and run the command in it, saving a container's start on every job after a workspace's first (needs "+sandbox.HelperName+", by default beside this binary; without it, a warning and no prestart)")
	fs.Int("sandbox-prestart-depth", sandbox.DefaultPrestartDepth, "the most Docker sandbox containers started ahead that may wait for one workspace's jobs; beyond the first, they are started once the runner has run nothing for a quarter of a second")
	fs.Int("sandbox-prestart-max", 0, "the most Docker sandbox containers started ahead that may wait for a job at once, the oldest removed first (0: twice --concurrency, at most "+strconv.Itoa(sandbox.DefaultPrestartMax)+")")
	fs.String("sandbox-helper", "", "path of "+sandbox.HelperName+" (default: beside this binary)")
	fs.Bool("sandbox-image-layers-only", false, "read every directory of Docker sandbox images from their layers, ignoring the images' "+sandbox.LabelImageTrees+" label (which has the sandbox serve those directories from a read-only copy on this host)")
	if p.Egress {
		fs.StringSlice("egress-allow", egress.DefaultAllow, "host:port (or *.domain:port) agent containers may reach through the egress proxy; repeatable; --egress-allow= for no network at all")
		fs.Int("egress-proxy-port", egress.DefaultPort, "port of the egress proxy on the egress network (0: any free port)")
		fs.String("egress-network", "", "internal Docker network of agent containers (default supervisor-egress-<hash of --host-id>, created if missing)")
	}
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

// SettingsFrom reads runner settings from v (the flags of AddRunnerFlags
// and of AddSandboxFlags with p).
func SettingsFrom(v *viper.Viper, log *slog.Logger, p Profile) (Settings, error) {
	s := Settings{
		NATSURL:     v.GetString("nats"),
		NATSTLS:     NATSTLS(v),
		NATSNkey:    v.GetString("nats-nkey"),
		RedisURL:    v.GetString("redis-url"),
		Redis:       RedisOptions(v),
		DataDir:     v.GetString("data-dir"),
		SandboxPath: v.GetString("sandbox-path"),
		ProcessUser: v.GetString("sandbox-process-user"),
		Host:        v.GetString("host-id"),
		Bus:         BusConfig(v),
		Log:         log,
		Sandbox:     strings.ToLower(strings.TrimSpace(v.GetString("sandbox"))),
		Docker: DockerSettings{
			Image: v.GetString("sandbox-image"),
			User:  v.GetString("sandbox-user"),
			Path:  v.GetString("sandbox-container-path"),

			ImageLayersOnly: v.GetBool("sandbox-image-layers-only"),
			Prestart:        v.GetBool("sandbox-prestart"),
			PrestartMax:     PrestartMax(v.GetInt("sandbox-prestart-max"), v.GetInt("concurrency")),
			PrestartDepth:   v.GetInt("sandbox-prestart-depth"),
			Helper:          v.GetString("sandbox-helper"),
		},
	}
	if s.Docker.PrestartMax < 0 {
		return Settings{}, fmt.Errorf("--sandbox-prestart-max must not be negative")
	}
	if s.Docker.PrestartDepth < 1 {
		return Settings{}, fmt.Errorf("--sandbox-prestart-depth must be at least 1")
	}
	bp, err := BreakerPolicy(v)
	if err != nil {
		return Settings{}, err
	}
	s.Breakers = bp
	switch s.Sandbox {
	case SandboxAuto, SandboxDocker, SandboxProcess:
	default:
		return Settings{}, fmt.Errorf("--sandbox %q: want %s, %s or %s", s.Sandbox, SandboxAuto, SandboxDocker, SandboxProcess)
	}
	mem, err := ParseBytes(v.GetString("sandbox-memory"))
	if err != nil {
		return Settings{}, fmt.Errorf("--sandbox-memory: %w", err)
	}
	s.Docker.Resources = sandbox.Resources{MemoryBytes: mem, CPUs: v.GetFloat64("sandbox-cpus"), Pids: v.GetInt64("sandbox-pids")}
	if s.Docker.Resources.CPUs < 0 || s.Docker.Resources.Pids < 0 {
		return Settings{}, fmt.Errorf("--sandbox-cpus and --sandbox-pids must not be negative")
	}
	if p.Egress {
		allow := StringList(v, "egress-allow")
		if _, err := egress.ParseAllowList(allow); err != nil {
			return Settings{}, fmt.Errorf("--egress-allow: %w", err)
		}
		port := v.GetInt("egress-proxy-port")
		if port < 0 || port > 65535 {
			return Settings{}, fmt.Errorf("--egress-proxy-port %d: not a port", port)
		}
		s.Egress = &EgressSettings{Allow: allow, Port: port, Network: v.GetString("egress-network")}
	}
	return s, nil
}

// StringList reads a list setting: the flag's values, or a
// SUPERVISOR_* variable, either split on commas, blanks dropped.
func StringList(v *viper.Viper, key string) []string {
	var out []string
	for _, s := range v.GetStringSlice(key) {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// ParseBytes parses a size: a number of bytes, or a number with a binary
// unit k, m, g or t (optionally followed by "i" and/or "b", any case:
// 512m, 4GiB, 1.5g).
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "b")
	t = strings.TrimSuffix(t, "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = strings.TrimSpace(t[:n-1])
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || f*float64(mult) >= math.MaxInt64 {
		return 0, fmt.Errorf("invalid size %q (want bytes, or e.g. 512MiB, 4GiB)", s)
	}
	return int64(f * float64(mult)), nil
}

// FormatBytes writes n as ParseBytes reads it, in the largest binary unit
// that divides it.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// PrestartMax is how many containers started ahead may wait at once: flag
// when it is set (not 0), else twice the runner's concurrency (a workspace
// slot per job, and as many again for a second repository, or a second
// container for each slot: PERF-80), at most sandbox.DefaultPrestartMax.
func PrestartMax(flag, concurrency int) int {
	if flag != 0 {
		return flag
	}
	return min(2*max(concurrency, 1), sandbox.DefaultPrestartMax)
}
