package config

import (
	"slices"
	"testing"
)

// A child binary gets this process's environment without the settings
// that would reconfigure it or redirect its git.
func TestChildEnv(t *testing.T) {
	t.Setenv("SUPERVISOR_REDIS_URL", "redis://elsewhere")
	t.Setenv("GIT_DIR", "/elsewhere/.git")
	t.Setenv("SUPERVISORLIKE", "kept")
	t.Setenv("HOME", "/home/kept")
	env := ChildEnv()
	for _, kv := range []string{"SUPERVISORLIKE=kept", "HOME=/home/kept"} {
		if !slices.Contains(env, kv) {
			t.Errorf("ChildEnv lacks %s", kv)
		}
	}
	for _, kv := range env {
		if kv == "SUPERVISOR_REDIS_URL=redis://elsewhere" || kv == "GIT_DIR=/elsewhere/.git" {
			t.Errorf("ChildEnv keeps %s", kv)
		}
	}
}
