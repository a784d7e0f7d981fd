package worker

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/redact"
)

// credentials hands an agent its CLI's provider keys: the variables its
// adapter's allow-list names, from the worker's secrets file or else the
// worker's own environment. Nothing else of the worker's environment
// reaches an agent, and no key comes from a job: a workflow may not set
// one (the coordinator rejects it) and the worker drops any a job carries.
type credentials struct {
	allow   map[string][]string
	secrets map[string]string
	// values are every key's value, for scrubbing what leaves the worker.
	values []string
}

// newCredentials reads the secrets file, if any, and collects the values
// agents may get. allow nil means each adapter's own variables
// (agentcli.Credentials).
func newCredentials(allow map[string][]string, secretsFile string) (*credentials, error) {
	c := &credentials{allow: allow}
	if c.allow == nil {
		c.allow = map[string][]string{}
		for _, name := range agentcli.Names() {
			c.allow[name] = agentcli.Credentials(name)
		}
	}
	for adapter, names := range c.allow {
		if _, ok := agentcli.Lookup(adapter); !ok {
			return nil, fmt.Errorf("credentials: unknown adapter %q (known: %s)", adapter, strings.Join(agentcli.Names(), ", "))
		}
		for _, n := range names {
			if !gates.ValidEnvName(n) {
				return nil, fmt.Errorf("credentials: %s: %q is not a variable name", adapter, n)
			}
		}
	}
	if secretsFile != "" {
		s, err := readSecrets(secretsFile)
		if err != nil {
			return nil, err
		}
		c.secrets = s
	}
	seen := map[string]bool{}
	for _, names := range c.allow {
		for _, n := range names {
			if v, ok := c.lookup(n); ok && len(v) >= minSecretLen && !seen[v] {
				seen[v] = true
				c.values = append(c.values, v)
			}
		}
	}
	// Longest first, so a value that contains another is masked whole.
	sort.Slice(c.values, func(i, j int) bool { return len(c.values[i]) > len(c.values[j]) })
	return c, nil
}

// minSecretLen is the shortest value scrubbed literally: shorter ones
// would mask ordinary words.
const minSecretLen = 8

// lookup is a key's value: the secrets file's, else the environment's.
func (c *credentials) lookup(name string) (string, bool) {
	if v, ok := c.secrets[name]; ok {
		return v, true
	}
	return os.LookupEnv(name)
}

// env returns the keys an agent of adapter gets.
func (c *credentials) env(adapter string) map[string]string {
	out := map[string]string{}
	for _, n := range c.allow[adapter] {
		if v, ok := c.lookup(n); ok && v != "" {
			out[n] = v
		}
	}
	return out
}

// scrub removes secrets from text leaving the worker: redact's patterns,
// then every key's value, literally.
func (c *credentials) scrub(s string) string {
	s = redact.String(s)
	for _, v := range c.values {
		s = strings.ReplaceAll(s, v, redact.Mask)
	}
	return s
}

// readSecrets reads a secrets file: KEY=VALUE lines (the value may be
// quoted, "value" or 'value'), blank lines and lines starting with #
// ignored. The file must not be readable by group
// or others.
func readSecrets(path string) (map[string]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secrets file %s: mode %04o lets others read it; chmod 600 it", path, perm)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		k, v, ok := strings.Cut(text, "=")
		k = strings.TrimSpace(k)
		if !ok || !gates.ValidEnvName(k) {
			// The line is not shown: it may hold a secret.
			return nil, fmt.Errorf("secrets file %s:%d: want KEY=VALUE", path, line)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("secrets file %s:%d: %s is set twice", path, line, k)
		}
		v = strings.TrimSpace(v)
		if n := len(v); n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n-1] == v[0] {
			v = v[1 : n-1] // KEY="value"
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", path, err)
	}
	return out, nil
}

// addCredentials adds the keys an agent of adapter gets to env, naming
// them (not their values) in the log.
func (w *Worker) addCredentials(env map[string]string, adapter string, logw *jobrun.LogWriter) {
	keys := w.creds.env(adapter)
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
