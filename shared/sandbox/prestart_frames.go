package sandbox

import (
	"encoding/binary"
	"io"
	"strconv"
)

// Frame types the helper of a container started ahead of its job writes
// on its standard output (see supervisor-sandbox-helper): the command's
// standard output and error, and its exit status once nothing of the job
// runs any more (PERF-75).
const (
	frameStdout = 'o'
	frameStderr = 'e'
	frameExit   = 'x'
)

// maxFrame bounds a frame's data; the helper writes at most 32 KiB.
const maxFrame = 1 << 20

// readHelperStreams is readStreams for a helper's container: the
// container's standard output carries the helper's frames, its standard
// error the helper's own messages. The command's exit status, once the
// helper reports it, is sent on the returned channel, after everything
// the command wrote has been passed on.
func readHelperStreams(spec Spec, r io.Reader) (*streams, <-chan int) {
	s := newStreams(spec)
	exit := make(chan int, 1)
	s.copy(&frameReader{out: s.outW, err: s.errW, exit: exit}, r)
	return s, exit
}

// frameReader decodes the helper's frames written to it, passing the
// command's output on to out and err and its exit status to exit. Bytes
// that are not a frame (which only a helper of another version would
// write) are passed on to out as they are, and no status is reported.
type frameReader struct {
	out, err io.Writer
	exit     chan<- int
	buf      []byte
	broken   bool
	done     bool
}

func (f *frameReader) Write(p []byte) (int, error) {
	if f.broken {
		return f.out.Write(p)
	}
	f.buf = append(f.buf, p...)
	at := 0
	for len(f.buf)-at >= 5 {
		typ, n := f.buf[at], int(binary.BigEndian.Uint32(f.buf[at+1:at+5]))
		if n > maxFrame || f.done || (typ != frameStdout && typ != frameStderr && typ != frameExit) {
			f.breakAt(at)
			return len(p), nil
		}
		if len(f.buf)-at < 5+n {
			break
		}
		data := f.buf[at+5 : at+5+n]
		switch typ {
		case frameStdout:
			_, _ = f.out.Write(data)
		case frameStderr:
			_, _ = f.err.Write(data)
		case frameExit:
			code, err := strconv.Atoi(string(data))
			if err != nil || code < 0 || code > 255 {
				f.breakAt(at)
				return len(p), nil
			}
			f.done = true
			f.exit <- code
		}
		at += 5 + n
	}
	// What is left is the start of a frame.
	f.buf = append(f.buf[:0], f.buf[at:]...)
	return len(p), nil
}

// breakAt gives up decoding: the bytes from at on, and all that follow,
// are passed on to out as they are.
func (f *frameReader) breakAt(at int) {
	f.broken = true
	_, _ = f.out.Write(f.buf[at:])
	f.buf = nil
}
