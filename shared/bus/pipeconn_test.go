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

// Closing the client's end lets the server read what was written before
// it, then the end of the stream, as closing a socket does.
func TestPipeConnCloseDeliversWhatWasWritten(t *testing.T) {
	server, client := net.Pipe()
	c := newPipeConn(client)
	if _, err := c.Write([]byte("UNSUB 1\r\n")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "UNSUB 1\r\n" {
		t.Fatalf("the server read %q, %v; want what was written before Close, then EOF", got, err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v, want net.ErrClosed", err)
	}
}
