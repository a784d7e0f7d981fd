package eventlog

import (
	"bytes"
	"errors"
	"fmt"

	json "github.com/goccy/go-json"
)

// A log message holds one event, or several of one workflow appended
// together (a batch): {"v":2,"events":[e1,e2,...]}, where each element is
// exactly what Encode makes of one event. The events of a batch are in
// the log, and folded, in the order they are listed, all at the batch's
// stream sequence. Decode reads only single events; DecodeAll reads both.

// batchPrefix opens every batch's encoding, and no single event's (an
// event's envelope names its type before any other field but v).
var batchPrefix = []byte(`{"v":2,"events":[`)

// MaxBatchEvents bounds the events of one batch.
const MaxBatchEvents = 1024

// ErrBatch is returned by Decode for a message holding a batch, which
// DecodeAll reads.
var ErrBatch = errors.New("the log message holds a batch of events")

// ErrEmptyBatch is returned for a batch with no event.
var ErrEmptyBatch = errors.New("event batch holds no event")

// batchEnvelope is a batch's encoding.
type batchEnvelope struct {
	V      int               `json:"v"`
	Events []json.RawMessage `json:"events"`
}

// JoinEncoded makes one log message of events already encoded by Encode,
// all of one workflow, in order: a single one is returned as it is.
func JoinEncoded(events [][]byte) ([]byte, error) {
	switch len(events) {
	case 0:
		return nil, ErrEmptyBatch
	case 1:
		return events[0], nil
	}
	if len(events) > MaxBatchEvents {
		return nil, fmt.Errorf("encode event batch: %d events, at most %d", len(events), MaxBatchEvents)
	}
	n := len(batchPrefix) + 2
	for _, e := range events {
		n += len(e) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, batchPrefix...)
	for i, e := range events {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e...)
	}
	return append(out, ']', '}'), nil
}

// IsBatch reports whether a log message holds a batch (by its opening
// bytes, without decoding it).
func IsBatch(data []byte) bool { return bytes.HasPrefix(data, batchPrefix) }

// DecodeAll decodes a log message: a single event (as Decode) or a batch,
// strictly. A batch must hold at least one event and at most
// MaxBatchEvents, every one of the same workflow and none a batch itself;
// if one of them does not decode, the whole message is refused.
func DecodeAll(data []byte) ([]Event, error) {
	if !IsBatch(data) {
		ev, err := Decode(data)
		if err != nil {
			return nil, err
		}
		return []Event{ev}, nil
	}
	var env batchEnvelope
	if err := strictUnmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("decode event batch: %w", err)
	}
	if len(env.Events) == 0 {
		return nil, fmt.Errorf("decode event batch: %w", ErrEmptyBatch)
	}
	if len(env.Events) > MaxBatchEvents {
		return nil, fmt.Errorf("decode event batch: %d events, at most %d", len(env.Events), MaxBatchEvents)
	}
	out := make([]Event, 0, len(env.Events))
	for i, raw := range env.Events {
		if IsBatch(raw) {
			return nil, fmt.Errorf("decode event batch: event %d is a batch", i)
		}
		ev, err := Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("decode event batch: event %d: %w", i, err)
		}
		if i > 0 && ev.WorkflowID != out[0].WorkflowID {
			return nil, fmt.Errorf("decode event batch: event %d is of workflow %s, the first of %s", i, ev.WorkflowID, out[0].WorkflowID)
		}
		out = append(out, ev)
	}
	return out, nil
}
