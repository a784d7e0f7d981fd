package worker

import (
	"sort"
	"strings"

	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// addCredentials adds the keys an agent of adapter gets to env, naming
// them (not their values) in the log.
func (w *Worker) addCredentials(env map[string]string, adapter string, logw *jobrun.LogWriter) {
	keys := w.creds.Env(adapter)
	if len(keys) == 0 {
		return
	}
	names := make([]string, 0, len(keys))
	for k, v := range keys {
		env[k] = v
		names = append(names, k)
	}
	sort.Strings(names)
	logw.Printf("credentials: %s", strings.Join(names, ", "))
}

// jobEnv is a job's own environment without provider keys: those reach
// an agent from its worker only (an old event or a forged job may carry
// them).
func (w *Worker) jobEnv(job *protocol.AgentJob, logw *jobrun.LogWriter) map[string]string {
	env := make(map[string]string, len(job.Env))
	for k, v := range job.Env {
		if agentcli.IsCredential(k) {
			logw.Printf("dropped %s from the job's environment: provider keys come from the worker only", k)
			continue
		}
		env[k] = v
	}
	return env
}
