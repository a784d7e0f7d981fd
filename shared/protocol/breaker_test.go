package protocol

import (
	"strings"
	"testing"
)

func TestBreakerScopes(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"claude", "-p", "--model", "opus"}, "agent:claude:opus"},
		{[]string{"/usr/local/bin/claude", "--model=sonnet", "-p"}, "agent:claude:sonnet"},
		{[]string{"codex", "exec"}, "agent:codex"},
		{[]string{"aider", "--model"}, "agent:aider"}, // a flag without its value
		{nil, "agent:"},
	} {
		if got := AgentScope(tc.argv); got != tc.want {
			t.Errorf("AgentScope(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
	test := GateScope("test", []string{"go", "test", "./..."})
	if !strings.HasPrefix(test, "gate:test:") || len(test) != len("gate:test:")+8 {
		t.Fatalf("GateScope = %q, want gate:test: and 8 hex digits", test)
	}
	if again := GateScope("test", []string{"go", "test", "./..."}); again != test {
		t.Errorf("GateScope is not deterministic: %q, %q", test, again)
	}
	for _, other := range []string{
		GateScope("test", []string{"go", "test", "-race", "./..."}),
		GateScope("test", []string{"go test", "./..."}), // arguments are kept apart
		GateScope("vet", []string{"go", "test", "./..."}),
	} {
		if other == test {
			t.Errorf("another gate or command has the same scope %q", other)
		}
	}
	if got := RepoScope("r-1a2b"); got != "repo:r-1a2b" {
		t.Errorf("RepoScope = %q", got)
	}
}
