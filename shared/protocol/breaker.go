package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
)

// Circuit-breaker scopes name the breakers the fleet shares in the state
// store. Before a runner runs a job it asks the breaker of what the job
// runs (its agent's command, or its gate) and the breaker of its
// repository; `coordinator breakers` lists them by these names.

// AgentScope is the breaker scope of an agent command: "agent:", the base
// name of argv[0], and ":" and the value of its --model flag when it has
// one ("agent:claude:opus"). Agents run with other arguments share it.
func AgentScope(argv []string) string {
	if len(argv) == 0 {
		return "agent:"
	}
	scope := "agent:" + filepath.Base(argv[0])
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if v, ok := strings.CutPrefix(a, "--model="); ok {
			return scope + ":" + v
		}
		if a == "--model" && i+1 < len(argv) {
			return scope + ":" + argv[i+1]
		}
	}
	return scope
}

// GateScope is the breaker scope of a gate: "gate:", its name, ":" and the
// first 8 hex digits of the SHA-256 of its command (each argument followed
// by a NUL), so a gate given another command gets a breaker of its own
// ("gate:test:1a2b3c4d").
func GateScope(name string, argv []string) string {
	h := sha256.New()
	for _, a := range argv {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	return "gate:" + name + ":" + hex.EncodeToString(h.Sum(nil))[:8]
}

// RepoScope is the breaker scope of a repository: "repo:" and its id
// (RepoRef.ID).
func RepoScope(id string) string { return "repo:" + id }
