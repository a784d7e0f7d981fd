package sandbox

import (
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/pkg/stdcopy"
)

// streams is a container run's output, read from the engine's multiplexed
// stream (a container's attach or an exec's): the tails a Result keeps and
// the whole lines passed on to Spec.Stdout and Spec.Stderr.
type streams struct {
	stdout, stderr *TailBuffer
	outW, errW     *lineWriter
	// copied is closed once the stream has ended.
	copied chan struct{}
}

// readStreams starts reading r into the tails and sinks of spec.
func readStreams(spec Spec, r io.Reader) *streams {
	s := newStreams(spec)
	s.copy(s.outW, r)
	return s
}

// newStreams returns the tails and sinks of spec, not yet reading.
func newStreams(spec Spec) *streams {
	s := &streams{stdout: NewTailBuffer(spec.OutputLimit), stderr: NewTailBuffer(spec.OutputLimit), copied: make(chan struct{})}
	var sinkMu sync.Mutex
	s.outW = &lineWriter{tail: s.stdout, sink: spec.Stdout, mu: &sinkMu}
	s.errW = &lineWriter{tail: s.stderr, sink: spec.Stderr, mu: &sinkMu}
	return s
}

// copy starts reading the engine's multiplexed stream r: its standard
// output into stdout, its standard error into the stderr sink.
func (s *streams) copy(stdout io.Writer, r io.Reader) {
	go func() {
		defer close(s.copied)
		_, _ = stdcopy.StdCopy(stdout, s.errW, r)
	}()
}

// finish waits, at most pipeDrainTimeout, for the stream to end (the
// engine may keep it open), then does what finishNow does.
func (s *streams) finish(closeStream func(), res *Result) {
	select {
	case <-s.copied:
	case <-time.After(pipeDrainTimeout):
	}
	s.finishNow(closeStream, res)
}

// finishNow closes the stream with closeStream at once (as when the
// helper has reported the command's end after all its output, PERF-75),
// passes on the unterminated last lines and puts the tails in res.
func (s *streams) finishNow(closeStream func(), res *Result) {
	closeStream()
	<-s.copied
	s.outW.flush()
	s.errW.flush()
	res.Stdout, res.StdoutTruncated = s.stdout.Bytes(), s.stdout.Truncated()
	res.Stderr, res.StderrTruncated = s.stderr.Bytes(), s.stderr.Truncated()
}

// setEnd records how the command ended, given its exit status as the
// runtime reported it (128+signal for a signal), whether the sandbox
// killed it, and res.OOMKilled: a command the sandbox killed, or the
// kernel for memory, has ExitCode -1 and the signal's name; any other its
// status.
func (res *Result) setEnd(code int, killed bool) {
	res.ExitCode = -1
	sigKill := 128 + int(syscall.SIGKILL)
	switch {
	case killed || (res.OOMKilled && code == sigKill):
		if code > 128 && code < 128+65 {
			res.Signal = signalName(syscall.Signal(code - 128))
		}
	default:
		res.ExitCode = code
	}
}
