package jobrun

import (
	"testing"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// A delivery's outcome label follows its disposition and the report sent.
func TestJobOutcome(t *testing.T) {
	agent := func(s protocol.AgentStatus) *protocol.Report {
		return &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{Status: s}}
	}
	gate := func(s protocol.GateStatus) *protocol.Report {
		return &protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{Status: s}}
	}
	for _, c := range []struct {
		name string
		disp bus.Disposition
		sent *protocol.Report
		want string
	}{
		{"agent succeeded", bus.Ack(), agent(protocol.AgentSucceeded), metrics.OutcomeSucceeded},
		{"agent failed", bus.Ack(), agent(protocol.AgentFailed), metrics.OutcomeFailed},
		{"agent timeout", bus.Ack(), agent(protocol.AgentTimeout), metrics.OutcomeFailed},
		{"agent error", bus.Ack(), agent(protocol.AgentError), metrics.OutcomeError},
		{"gate passed", bus.Ack(), gate(protocol.GatePassed), metrics.OutcomeSucceeded},
		{"gate failed", bus.Ack(), gate(protocol.GateFailed), metrics.OutcomeFailed},
		{"gate pending acked", bus.Ack(), gate(protocol.GatePending), metrics.OutcomePending},
		{"gate pending handed back", bus.Nak(5), gate(protocol.GatePending), metrics.OutcomePending},
		{"gate error", bus.Ack(), gate(protocol.GateError), metrics.OutcomeError},
		{"handed back", bus.Nak(0), nil, metrics.OutcomeHandedBack},
		{"abandoned", bus.Abandon(), nil, metrics.OutcomeAbandoned},
		{"dropped", bus.Term("finished"), nil, metrics.OutcomeDropped},
	} {
		if got := jobOutcome(c.disp, c.sent); got != c.want {
			t.Errorf("%s: outcome %q, want %q", c.name, got, c.want)
		}
	}
}
