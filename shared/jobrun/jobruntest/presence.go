package jobruntest

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Runner reads the runners bucket's entry of the runner of kind on host;
// ok is false when there is none. It fails the test on any other error.
func (f *Fleet) Runner(kind protocol.JobKind, host string) (info protocol.RunnerInfo, ok bool) {
	f.t.Helper()
	e, err := f.Bus.Runners.Get(testkit.Context(f.t, 10*time.Second), protocol.RunnerKey(kind, host))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return protocol.RunnerInfo{}, false
	}
	if err != nil {
		f.t.Fatalf("runners bucket: get %s: %v", protocol.RunnerKey(kind, host), err)
	}
	if err := json.Unmarshal(e.Value(), &info); err != nil {
		f.t.Fatalf("runners bucket: entry %s: %v", e.Key(), err)
	}
	return info, true
}

// WaitRunner waits until the runner of kind on host has an entry for
// which cond holds, and returns it; it fails the test after within.
func (f *Fleet) WaitRunner(kind protocol.JobKind, host string, within time.Duration, what string,
	cond func(protocol.RunnerInfo) bool) protocol.RunnerInfo {
	f.t.Helper()
	var last protocol.RunnerInfo
	testkit.WaitFor(f.t, within, 50*time.Millisecond, what, func() bool {
		info, ok := f.Runner(kind, host)
		last = info
		return ok && cond(info)
	})
	return last
}
