package sandbox

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// frame encodes one helper frame.
func frame(typ byte, data string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(data)))
	return append(b, data...)
}

// PERF-75: the helper's frames are decoded however the stream splits
// them: the command's output goes to stdout and stderr in order, and its
// exit status is reported once, after all of it. Bytes that are not a
// frame are passed on as they are, and report nothing.
func TestFrameReader(t *testing.T) {
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, c := range []struct {
		name           string
		in             []byte
		stdout, stderr string
		exit           int // -1: none reported
	}{
		{"output and exit", join(frame('o', "out\n"), frame('e', "err\n"), frame('o', "more"), frame('x', "3")), "out\nmore", "err\n", 3},
		{"empty frames", join(frame('o', ""), frame('x', "0")), "", "", 0},
		{"no exit yet", join(frame('o', "partial")), "partial", "", -1},
		{"an unknown type", join(frame('o', "a"), []byte("zzzzzz")), "azzzzzz", "", -1},
		{"a bad status", join(frame('x', "two")), string(frame('x', "two")), "", -1},
		{"a status out of range", join(frame('x', "256")), string(frame('x', "256")), "", -1},
		{"bytes after the exit", join(frame('x', "1"), frame('o', "late")), string(frame('o', "late")), "", 1},
		{"a frame too long", []byte{'o', 0xff, 0, 0, 0, 'a'}, "o\xff\x00\x00\x00a", "", -1},
	} {
		for _, step := range []int{1, 2, 7, 1 << 20} {
			var out, errb bytes.Buffer
			exit := make(chan int, 1)
			f := &frameReader{out: &out, err: &errb, exit: exit}
			for i := 0; i < len(c.in); i += step {
				if n, err := f.Write(c.in[i:min(i+step, len(c.in))]); err != nil || n != min(step, len(c.in)-i) {
					t.Fatalf("%s, step %d: Write = %d, %v", c.name, step, n, err)
				}
			}
			got := -1
			select {
			case got = <-exit:
			default:
			}
			if out.String() != c.stdout || errb.String() != c.stderr || got != c.exit {
				t.Errorf("%s, step %d: stdout %q, stderr %q, exit %d; want %q, %q, %d",
					c.name, step, out.String(), errb.String(), got, c.stdout, c.stderr, c.exit)
			}
		}
	}
}
