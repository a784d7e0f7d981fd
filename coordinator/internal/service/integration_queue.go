package service

import (
	"slices"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// queueEntry is node n's place in w's integration queue for the API, nil
// when it does not wait in it.
func queueEntry(w *statemachine.Workflow, n *statemachine.Node) *api.QueueEntry {
	if n.Status != protocol.NodeIntegrating || n.Integrated() {
		return nil
	}
	pos := slices.Index(w.IntegrationQueue(), n.ID)
	if pos < 0 {
		return nil
	}
	e := &api.QueueEntry{Position: pos + 1}
	s := n.Speculation()
	if s == nil {
		return e
	}
	e.Speculation, e.Integrated, e.Ahead = s.ID, s.Integrated, s.Ahead
	for _, name := range w.IntegrationOrder {
		gs := api.GateSummary{Name: name, Attempt: n.Attempt}
		if g := s.Gates[name]; g != nil {
			gs = gateSummary(name, n.Attempt, g.Result)
			gs.Status, gs.Round = g.Status, g.Round
			if g.Host != "" {
				gs.Host = g.Host
			}
		}
		e.Gates = append(e.Gates, gs)
	}
	return e
}
