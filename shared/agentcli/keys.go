package agentcli

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/supervisorhq/supervisor/shared/redact"
)

// Keys hand an agent its CLI's provider keys: the variables its
// adapter's allow-list names, from a runner's secrets file or else the
// runner's own environment (the worker's for agents, the gate runner's
// for a review gate's reviewers). Nothing else of the runner's
// environment reaches an agent, and no key comes from a job: a workflow
// may not set one (the coordinator rejects it) and a runner drops any a
// job carries. The zero Keys hands out nothing and scrubs with redact's
// patterns only.
type Keys struct {
	allow   map[string][]string
	secrets map[string]string
	// scrub masks every key's value and the secret values of the
	// runner's own environment (redact.EnvSecrets) in what leaves the
	// runner.
	scrub *redact.Redactor
}

// NewKeys reads the secrets file, if any, and collects the values agents
// may get and those Scrub masks. allow nil means each adapter's own variables (Credentials).
func NewKeys(allow map[string][]string, secretsFile string) (*Keys, error) {
	c := &Keys{allow: allow}
	if c.allow == nil {
		c.allow = map[string][]string{}
		for _, name := range Names() {
			c.allow[name] = Credentials(name)
		}
	}
	for adapter, names := range c.allow {
		if _, ok := Lookup(adapter); !ok {
			return nil, fmt.Errorf("credentials: unknown adapter %q (known: %s)", adapter, strings.Join(Names(), ", "))
		}
		for _, n := range names {
			if !validEnvName(n) {
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
	var values []string
	for _, names := range c.allow {
		for _, n := range names {
			if v, ok := c.lookup(n); ok {
				values = append(values, v)
			}
		}
	}
	for _, v := range c.secrets {
		values = append(values, v)
	}
	c.scrub = redact.New(append(values, redact.EnvSecrets(os.Environ())...)...)
	return c, nil
}

// lookup is a key's value: the secrets file's, else the environment's.
func (c *Keys) lookup(name string) (string, bool) {
	if v, ok := c.secrets[name]; ok {
		return v, true
	}
	return os.LookupEnv(name)
}

// Env returns the keys an agent of adapter gets.
func (c *Keys) Env(adapter string) map[string]string {
	out := map[string]string{}
	for _, n := range c.allow[adapter] {
		if v, ok := c.lookup(n); ok && v != "" {
			out[n] = v
		}
	}
	return out
}

// Scrub removes secrets from text leaving the runner: every value of the
// secrets file, every allow-listed key's value from the environment (each
// at least redact.MinValueLen long), and the values of the runner's environment
// variables whose names say they are secrets, literally; then redact's
// patterns. The zero and the nil Keys apply the patterns only.
func (c *Keys) Scrub(s string) string {
	if c == nil {
		return redact.String(s)
	}
	return c.scrub.String(s)
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
		if !ok || !validEnvName(k) {
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

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validEnvName reports whether s is a POSIX environment variable name.
func validEnvName(s string) bool { return envNameRE.MatchString(s) }
