package protocol

import "time"

// BucketRunners is the KV bucket in which every worker and gate runner
// announces itself (RunnerInfo under RunnerKey), renewed every
// RunnerAnnounceInterval; an entry not renewed within RunnerTTL expires,
// so the bucket lists the runners seen recently.
const BucketRunners = "sup-runners"

// RunnerAnnounceInterval is how often a runner renews its RunnerInfo.
const RunnerAnnounceInterval = 10 * time.Second

// RunnerTTL is how long a RunnerInfo outlives its last renewal.
const RunnerTTL = 45 * time.Second

// RunnerKey is the key of a runner's RunnerInfo: its kind and host, each
// character of the host that a key cannot hold (anything but letters,
// digits, '-', '_' and '=') written as '_'.
func RunnerKey(kind JobKind, host string) string {
	b := []byte(host)
	for i, c := range b {
		if !keyChar(c) {
			b[i] = '_'
		}
	}
	return string(kind) + "." + string(b)
}

// keyChar reports whether c may stand in a key token.
func keyChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return c == '-' || c == '_' || c == '='
}

// RunnerInfo is what a worker or gate runner announces about itself: who
// it is, what it takes, how busy it is, and what it has done since it
// started. The coordinator's fleet API lists them (the dashboard's fleet
// page, `coordinator fleet`).
type RunnerInfo struct {
	// Kind is agent (a worker) or gate (a gate runner).
	Kind JobKind `json:"kind"`
	// Host is the runner's host name (its --id).
	Host string `json:"host"`
	// Pools are the pools it consumes.
	Pools []string `json:"pools"`
	// Labels are its labels (gpus, gpu, …).
	Labels map[string]string `json:"labels,omitempty"`
	// Sandbox names its sandbox: process or docker.
	Sandbox string `json:"sandbox,omitempty"`
	// SandboxOff names the process sandbox's protections that are off on
	// this runner (sandbox-user, runner-environment, …; see
	// sandbox.Protection).
	SandboxOff []string `json:"sandbox_off,omitempty"`
	// Version is the binary's version.
	Version string `json:"version,omitempty"`
	// Slots is how many jobs it runs at once; Busy how many it runs now.
	Slots int `json:"slots"`
	Busy  int `json:"busy"`
	// Jobs are the jobs it runs now.
	Jobs []RunnerJob `json:"jobs,omitempty"`
	// Stats count what it has done since StartedAt.
	Stats RunnerStats `json:"stats"`
	// StartedAt is when it started; SeenAt when it last announced itself.
	StartedAt time.Time `json:"started_at"`
	SeenAt    time.Time `json:"seen_at"`
}

// RunnerJob is a job a runner is running.
type RunnerJob struct {
	JobID      string    `json:"job_id"`
	WorkflowID string    `json:"workflow_id"`
	NodeID     string    `json:"node_id"`
	Attempt    int       `json:"attempt"`
	Gate       string    `json:"gate,omitempty"`
	StartedAt  time.Time `json:"started_at"`
}

// RunnerStats count a runner's jobs since it started: by outcome, and for
// a gate runner its gate cache lookups.
type RunnerStats struct {
	Succeeded   uint64 `json:"succeeded"`
	Failed      uint64 `json:"failed"`
	CacheHits   uint64 `json:"cache_hits,omitempty"`
	CacheMisses uint64 `json:"cache_misses,omitempty"`
}
