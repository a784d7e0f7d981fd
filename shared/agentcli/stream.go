package agentcli

import (
	"bytes"
	"sync"
)

// Stream feeds a Parser from output as it is written: it is the io.Writer
// a runner gives a sandbox for the CLI's standard output. Each complete
// line goes to the parser as soon as it arrives, its events to emit; a
// line longer than MaxLine is skipped and counted as malformed, as Parse
// does. Write and Finish may be called from different goroutines.
type Stream struct {
	mu   sync.Mutex
	p    Parser
	emit func(line []byte, events []Event)
	buf  []byte
	// skipping is set while the rest of an over-long line is discarded.
	skipping bool
	long     int
	done     bool
}

// NewStream returns a Stream that feeds p and passes each line, without
// its ending, and the events the parser found in it to emit (when not
// nil). emit runs with the Stream locked: it must not call back into it.
func NewStream(p Parser, emit func(line []byte, events []Event)) *Stream {
	return &Stream{p: p, emit: emit}
}

// Write implements io.Writer. It never fails; after Finish it drops b.
func (s *Stream) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(b)
	if s.done {
		return n, nil
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.add(b)
			break
		}
		s.add(b[:i+1])
		b = b[i+1:]
		if s.skipping {
			s.skipping = false
			s.buf = s.buf[:0]
			continue
		}
		s.line()
	}
	return n, nil
}

// add appends part of a line, switching to skipping once it is too long.
func (s *Stream) add(b []byte) {
	if s.skipping {
		return
	}
	if len(s.buf)+len(b) > MaxLine+2 { // room for "\r\n"
		s.skipping = true
		s.long++
		s.buf = s.buf[:0]
		return
	}
	s.buf = append(s.buf, b...)
}

// line hands the buffered line to the parser.
func (s *Stream) line() {
	line := trimEOL(s.buf)
	if len(line) > MaxLine {
		s.long++
	} else {
		evs := s.p.Line(line)
		if s.emit != nil {
			s.emit(line, evs)
		}
	}
	s.buf = s.buf[:0]
}

// Finish ends the run: a last line without an ending is parsed, then the
// parser finishes with the CLI's exit code and standard error. Later
// writes are dropped.
func (s *Stream) Finish(exitCode int, stderr []byte) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		if !s.skipping && len(s.buf) > 0 {
			s.line()
		}
		s.done = true
	}
	res := s.p.Finish(exitCode, stderr)
	res.Malformed += s.long
	return res
}
