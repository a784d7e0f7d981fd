package cli

import (
	"bytes"
	"testing"
)

// serve refuses a leader lease TTL too short to renew (every third of it)
// before it connects to anything (CHAOS-04).
func TestServeLeaderTTL(t *testing.T) {
	var out, errOut bytes.Buffer
	// No NATS listens on port 1: the refusal must come first.
	code := Main([]string{"serve", "--leader-ttl", "1s", "--nats", "nats://127.0.0.1:1"}, &out, &errOut)
	wantCode(t, cliResult{code: code, stdout: out.String(), stderr: errOut.String()}, ExitUsage, "--leader-ttl 1s: want 3s or more")
}
