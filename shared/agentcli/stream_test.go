package agentcli

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestStreamMatchesParse feeds every fixture to a Stream in chunks of
// several sizes, as a sandbox writes output while the CLI runs: the Result
// and the events are those Parse gives reading the output whole.
func TestStreamMatchesParse(t *testing.T) {
	for _, f := range fixtures {
		if f.stdout == "" {
			continue
		}
		out, err := os.ReadFile(filepath.Join("testdata", f.stdout))
		if err != nil {
			t.Fatal(err)
		}
		var stderr []byte
		if f.stderr != "" {
			if stderr, err = os.ReadFile(filepath.Join("testdata", f.stderr)); err != nil {
				t.Fatal(err)
			}
		}
		a, _ := Lookup(f.adapter)
		s := Settings{OutputFormat: f.format}
		var want []Event
		wantRes, err := Parse(a.NewParser(s), bytes.NewReader(out), f.exit, stderr, func(e Event) { want = append(want, e) })
		if err != nil {
			t.Fatal(err)
		}
		for _, chunk := range []int{1, 7, 100, len(out) + 1} {
			var got []Event
			var lines int
			st := NewStream(a.NewParser(s), func(_ []byte, evs []Event) { lines++; got = append(got, evs...) })
			for b := out; len(b) > 0; {
				n := min(chunk, len(b))
				if _, err := st.Write(b[:n]); err != nil {
					t.Fatal(err)
				}
				b = b[n:]
			}
			res := st.Finish(f.exit, stderr)
			if !reflect.DeepEqual(res, wantRes) {
				t.Errorf("%s, chunks of %d: Result\n%+v\nwant\n%+v", f.name, chunk, res, wantRes)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s, chunks of %d: events %v, want %v", f.name, chunk, got, want)
			}
			if lines == 0 {
				t.Errorf("%s: emit never called", f.name)
			}
		}
	}
}

// TestStreamLongLine skips a line past MaxLine, counting it malformed,
// and parses the lines around it.
func TestStreamLongLine(t *testing.T) {
	st := NewStream(Command{}.NewParser(Settings{}), nil)
	var got []string
	st.emit = func(line []byte, _ []Event) { got = append(got, string(line)) }
	_, _ = st.Write([]byte("first\r\n"))
	long := bytes.Repeat([]byte("x"), 1<<20)
	for range MaxLine/len(long) + 1 {
		_, _ = st.Write(long)
	}
	_, _ = st.Write([]byte("\nlast"))
	res := st.Finish(0, nil)
	if want := []string{"first", "last"}; !reflect.DeepEqual(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
	if res.Malformed != 1 {
		t.Errorf("Malformed = %d, want 1", res.Malformed)
	}
}
