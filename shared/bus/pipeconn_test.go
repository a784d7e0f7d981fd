package bus

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/nettest"
)

// The buffered end of an in-process pipe behaves as a net.Conn should
// (nettest's conformance suite: ordering, deadlines, closing, racing
// calls), against a bare net.Pipe end.
func TestPipeConnIsANetConn(t *testing.T) {
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		a, b := net.Pipe()
		c := newPipeConn(a)
		return c, b, func() { _ = c.Close(); _ = b.Close() }, nil
	})
}

// Neither side waits for the other to read, up to the buffer's limit: the
// client's write returns with the server not reading, and the server's
// write returns with the client not reading. A bare net.Pipe would block
// both, which is what could tie the NATS client's lock to the server's.
func TestPipeConnNeitherSideWaits(t *testing.T) {
	server, client := net.Pipe()
	c := newPipeConn(client)
	defer func() { _ = c.Close(); _ = server.Close() }()
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	done := make(chan error, 2)
	go func() { _, err := c.Write(data); done <- err }()
	go func() { _, err := server.Write(data); done <- err }()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a write waited for the other side to read")
		}
	}
	for _, r := range []io.Reader{c, server} {
		got := make([]byte, len(data))
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes, err %v; want the 1 MiB written", len(got), err)
		}
	}
}

// Closing the client's end returns at once, as closing a socket does, and
// the server still reads what was written before it, then the end of the
// stream.
func TestPipeConnCloseDeliversWhatWasWritten(t *testing.T) {
	server, client := net.Pipe()
	c := newPipeConn(client)
	if _, err := c.Write([]byte("UNSUB 1\r\n")); err != nil {
		t.Fatal(err)
	}
	// The server reads nothing until Close has returned.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "UNSUB 1\r\n" {
		t.Fatalf("the server read %q, %v; want what was written before Close, then EOF", got, err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v, want net.ErrClosed", err)
	}
}

// A deadline removed while two reads wait on it no longer ends either of
// them: both wait for data.
func TestPipeConnDeadlineRemovedWhileReading(t *testing.T) {
	server, client := net.Pipe()
	c := newPipeConn(client)
	defer func() { _ = c.Close(); _ = server.Close() }()
	if err := c.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Read(make([]byte, 1))
			got <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Fatalf("a read ended at the removed deadline: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := server.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-got; err != nil {
			t.Fatalf("read: %v, want a byte", err)
		}
	}
}
