package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// The operator's retry policies come from the config file (RETRY-08);
// every bad entry is named with its key.
func TestLoadRetryPolicies(t *testing.T) {
	load := func(yaml string) (map[string]protocol.RetryPolicy, error) {
		t.Helper()
		file := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		v := viper.New()
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			t.Fatal(err)
		}
		return (&env{v: v}).loadRetryPolicies()
	}
	got, err := load("retry_policies:\n  patient: {max_attempts: 4, initial_delay: 10s, multiplier: 2, max_delay: 5m, jitter: 0.2}\n" +
		"  default: {initial_delay: 1}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := protocol.RetryPolicy{Name: "patient", MaxAttempts: 4, InitialDelay: 10 * time.Second, Multiplier: 2,
		MaxDelay: 5 * time.Minute, Jitter: 0.2}
	if got["patient"] != want {
		t.Errorf("patient = %+v, want %+v", got["patient"], want)
	}
	if d := got["default"]; d.InitialDelay != time.Second || d.Multiplier != 1 || d.MaxAttempts != 0 {
		t.Errorf("default, redefined = %+v", d)
	}
	if got, err := load("other: 1\n"); err != nil || got != nil {
		t.Errorf("no section: %v, %v", got, err)
	}
	for yaml, msg := range map[string]string{
		"retry_policies:\n  p: {initial_delay: soon}\n":              "retry_policies.p: initial_delay:",
		"retry_policies:\n  p: {max_attempts: 50}\n":                 "retry_policies.p: max_attempts 50: must be between 1 and 20",
		"retry_policies:\n  p: {multiplier: 0.5}\n":                  "multiplier 0.5: must be between 1 and 10",
		"retry_policies:\n  p: {initial_delay: 1m, max_delay: 1s}\n": "max_delay 1s is shorter than initial_delay 1m0s",
		"retry_policies:\n  p: {backoff: 2}\n":                       "retry_policies.p: unknown key \"backoff\"",
		"retry_policies:\n  p: 3\n":                                  "retry_policies.p: must be a mapping",
		"retry_policies:\n  Bad.Name: {jitter: 0.1}\n":               "is not a valid name",
	} {
		if _, err := load(yaml); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error containing %q", yaml, err, msg)
		}
	}
}
