package bus

import (
	"bytes"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// pipeBufferLimit bounds what a pipeConn holds in each direction, as a
// socket's buffers do: past it a Write waits for the server to read, and
// the connection stops reading the server until the client has read.
const pipeBufferLimit = 4 << 20

// pipeDrainTimeout bounds how long, after Close, the pipe stays open for
// the server to read what the client wrote before it.
const pipeDrainTimeout = 2 * time.Second

// bufferedProvider hands out in-process connections wrapped in pipeConn.
type bufferedProvider struct {
	srv nats.InProcessConnProvider
}

// InProcessConn opens the server's in-memory pipe and buffers it.
func (p bufferedProvider) InProcessConn() (net.Conn, error) {
	c, err := p.srv.InProcessConn()
	if err != nil {
		return nil, err
	}
	return newPipeConn(c), nil
}

// pipeConn is the client's end of an in-process server's in-memory pipe
// (net.Pipe), with a buffer in each direction, as a socket has.
//
// A bare net.Pipe is synchronous: a write waits until the other end has
// read it. The NATS client writes while holding its connection's lock,
// and the server's goroutine that reads one client also writes to others;
// with every write waiting on a reader, two clients and the server could
// wait on each other until the server's write deadline cut one off. Here a
// Write returns once its bytes are buffered (up to pipeBufferLimit), and a
// goroutine of its own reads the server as soon as it writes, so neither
// side waits on the other's locks.
type pipeConn struct {
	pipe net.Conn

	mu            sync.Mutex
	in            bytes.Buffer // read from the server, not yet by the client
	inErr         error        // why reading the server stopped
	out           bytes.Buffer // written by the client, not yet to the server
	outErr        error        // why writing to the server stopped
	closed        bool
	readDeadline  time.Time
	writeDeadline time.Time

	// Wake-ups, each with room for one: canRead (in grew, reading
	// stopped, closed or the read deadline moved), canWrite (out shrank,
	// writing stopped, closed or the write deadline moved), toWrite (out
	// grew or closed), hasRoom (in shrank or closed).
	canRead, canWrite, toWrite, hasRoom chan struct{}
	// flushed is closed when the writer has stopped.
	flushed chan struct{}
}

func newPipeConn(pipe net.Conn) *pipeConn {
	c := &pipeConn{
		pipe:    pipe,
		canRead: make(chan struct{}, 1), canWrite: make(chan struct{}, 1),
		toWrite: make(chan struct{}, 1), hasRoom: make(chan struct{}, 1),
		flushed: make(chan struct{}),
	}
	go c.readServer()
	go c.writeServer()
	return c
}

// wake signals ch without waiting.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// readServer reads the server into in until the pipe fails or closes.
func (c *pipeConn) readServer() {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.pipe.Read(buf)
		c.mu.Lock()
		c.in.Write(buf[:n])
		if err != nil && c.inErr == nil {
			c.inErr = err
		}
		c.mu.Unlock()
		wake(c.canRead)
		if err != nil {
			return
		}
		for {
			c.mu.Lock()
			full := c.in.Len() >= pipeBufferLimit && !c.closed
			c.mu.Unlock()
			if !full {
				break
			}
			<-c.hasRoom
		}
	}
}

// writeServer writes out to the server until the connection is closed
// and out is empty, or the pipe fails.
func (c *pipeConn) writeServer() {
	defer close(c.flushed)
	var chunk []byte
	for {
		<-c.toWrite
		for {
			c.mu.Lock()
			if c.out.Len() == 0 {
				closed := c.closed
				c.mu.Unlock()
				if closed {
					return
				}
				break
			}
			chunk = append(chunk[:0], c.out.Bytes()...)
			c.out.Reset()
			c.mu.Unlock()
			wake(c.canWrite)
			if _, err := c.pipe.Write(chunk); err != nil {
				c.mu.Lock()
				if c.outErr == nil {
					c.outErr = err
				}
				c.mu.Unlock()
				wake(c.canWrite)
				return
			}
		}
	}
}

// Read reads what the server wrote, waiting for it until the read
// deadline.
func (c *pipeConn) Read(p []byte) (int, error) {
	// Whatever this Read finds, another one waiting looks again.
	defer wake(c.canRead)
	for {
		c.mu.Lock()
		deadline := c.readDeadline
		switch {
		case c.closed:
			c.mu.Unlock()
			return 0, net.ErrClosed
		case expired(deadline):
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		case c.in.Len() > 0:
			n, _ := c.in.Read(p)
			c.mu.Unlock()
			wake(c.hasRoom)
			return n, nil
		case c.inErr != nil:
			err := c.inErr
			c.mu.Unlock()
			return 0, err
		}
		c.mu.Unlock()
		waitUntil(c.canRead, deadline)
	}
}

// Write buffers p for the server, waiting only while the buffer is full
// (until the write deadline).
func (c *pipeConn) Write(p []byte) (int, error) {
	defer wake(c.canWrite)
	for {
		c.mu.Lock()
		deadline := c.writeDeadline
		switch {
		case c.closed:
			c.mu.Unlock()
			return 0, net.ErrClosed
		case expired(deadline):
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		case c.outErr != nil:
			err := c.outErr
			c.mu.Unlock()
			return 0, err
		case c.out.Len() < pipeBufferLimit || len(p) == 0:
			c.out.Write(p)
			c.mu.Unlock()
			wake(c.toWrite)
			return len(p), nil
		}
		c.mu.Unlock()
		waitUntil(c.canWrite, deadline)
	}
}

// expired reports whether deadline is set and has passed.
func expired(deadline time.Time) bool {
	return !deadline.IsZero() && !time.Now().Before(deadline)
}

// waitUntil waits for a wake-up on ch or for deadline (if set) to pass,
// whichever comes first. The caller looks at the deadline again (it may
// have moved meanwhile) and says whether it has passed.
func waitUntil(ch chan struct{}, deadline time.Time) {
	if deadline.IsZero() {
		<-ch
		return
	}
	d := time.Until(deadline)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// Close returns at once, as closing a socket does; what was written before
// it is still delivered: the pipe is closed once the server has read it,
// or after pipeDrainTimeout if the server does not read. Reads and writes
// after Close fail with net.ErrClosed.
func (c *pipeConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.closed = true
	c.mu.Unlock()
	wake(c.toWrite)
	wake(c.canRead)
	wake(c.canWrite)
	wake(c.hasRoom)
	go func() {
		t := time.NewTimer(pipeDrainTimeout)
		defer t.Stop()
		select {
		case <-c.flushed:
		case <-t.C:
		}
		_ = c.pipe.Close()
	}()
	return nil
}

// LocalAddr is the pipe's address.
func (c *pipeConn) LocalAddr() net.Addr { return c.pipe.LocalAddr() }

// RemoteAddr is the pipe's address ("pipe").
func (c *pipeConn) RemoteAddr() net.Addr { return c.pipe.RemoteAddr() }

// SetDeadline sets both deadlines.
func (c *pipeConn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// SetReadDeadline bounds Read's wait, also of a Read already waiting.
func (c *pipeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	wake(c.canRead)
	return nil
}

// SetWriteDeadline bounds Write's wait for room in the buffer, also of a
// Write already waiting.
func (c *pipeConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeDeadline = t
	c.mu.Unlock()
	wake(c.canWrite)
	return nil
}
