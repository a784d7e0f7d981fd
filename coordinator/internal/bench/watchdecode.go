package bench

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// The bench follows every event of the log in its own process, so what it
// spends reading them is counted with the coordinator's CPU. It reads them
// leniently and only as far as watcher.applyLocked looks: the envelope, and the
// body of the types whose fields it uses. The coordinator reads the same
// messages strictly (eventlog.DecodeAll).

// leanEnvelope is the part of an event's envelope the watcher reads.
type leanEnvelope struct {
	Type       eventlog.Type   `json:"type"`
	WorkflowID string          `json:"workflow_id"`
	NodeID     string          `json:"node_id"`
	Time       time.Time       `json:"time"`
	Data       json.RawMessage `json:"data"`
}

// watchDecode reads a log message (one event or a batch) for the watcher:
// the events it counts, in order, with the body fields it uses; the others
// are left out.
func watchDecode(data []byte) ([]eventlog.Event, error) {
	var envs []leanEnvelope
	if eventlog.IsBatch(data) {
		var b struct {
			Events []leanEnvelope `json:"events"`
		}
		if err := json.Unmarshal(data, &b); err != nil {
			return nil, fmt.Errorf("read event batch: %w", err)
		}
		envs = b.Events
	} else {
		var env leanEnvelope
		if err := json.Unmarshal(data, &env); err != nil {
			return nil, fmt.Errorf("read event: %w", err)
		}
		envs = []leanEnvelope{env}
	}
	out := make([]eventlog.Event, 0, len(envs))
	for _, env := range envs {
		b, err := watchBody(env)
		if err != nil {
			return nil, fmt.Errorf("read %s event: %w", env.Type, err)
		}
		if b != nil {
			out = append(out, eventlog.Event{WorkflowID: env.WorkflowID, NodeID: env.NodeID, Time: env.Time, Body: b})
		}
	}
	return out, nil
}

// watchBody is the body of env as far as watcher.applyLocked reads it: nil for
// a type it does not count, an empty body for one whose fields it does
// not use.
func watchBody(env leanEnvelope) (eventlog.Body, error) {
	switch env.Type {
	case eventlog.TypeNodeAgentDone:
		return eventlog.NodeAgentDone{}, nil
	case eventlog.TypeGateDispatched:
		return eventlog.GateDispatched{}, nil
	case eventlog.TypeNodeReady:
		return body[eventlog.NodeReady](env.Data)
	case eventlog.TypeNodeStarted:
		return body[eventlog.NodeStarted](env.Data)
	case eventlog.TypeNodeRetry:
		return body[eventlog.NodeRetryScheduled](env.Data)
	case eventlog.TypeNodeEscalated:
		return body[eventlog.NodeEscalated](env.Data)
	case eventlog.TypeGateStarted:
		return body[eventlog.GateStarted](env.Data)
	case eventlog.TypeGateFinished:
		return body[eventlog.GateFinished](env.Data)
	case eventlog.TypeNodeFinished:
		return body[eventlog.NodeFinished](env.Data)
	case eventlog.TypeWorkflowFinished:
		return body[eventlog.WorkflowFinished](env.Data)
	}
	return nil, nil
}

// body decodes data as a body of type T.
func body[T eventlog.Body](data json.RawMessage) (eventlog.Body, error) {
	var b T
	err := json.Unmarshal(data, &b)
	return b, err
}
