package integrity

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestParseStatusZ covers WI-11 and WI-13: status
// letters are the first two bytes whatever they are (space padding
// included), renames and copies in either column carry a second field, and
// nothing is dropped.
func TestParseStatusZ(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []StatusEntry
	}{
		{"empty", "", nil},
		{"space-padded letters", " M a.go\x00M  b.go\x00 D c.go\x00A  d.go\x00MM e.go\x00 T f\x00",
			[]StatusEntry{
				{X: ' ', Y: 'M', Path: "a.go"}, {X: 'M', Y: ' ', Path: "b.go"}, {X: ' ', Y: 'D', Path: "c.go"},
				{X: 'A', Y: ' ', Path: "d.go"}, {X: 'M', Y: 'M', Path: "e.go"}, {X: ' ', Y: 'T', Path: "f"},
			}},
		{"untracked and ignored", "?? new.txt\x00!! build/\x00!! x.log\x00",
			[]StatusEntry{{X: '?', Y: '?', Path: "new.txt"}, {X: '!', Y: '!', Path: "build/"}, {X: '!', Y: '!', Path: "x.log"}}},
		{"WI-11 staged rename", "R  new name.txt\x00old name.txt\x00?? z\x00",
			[]StatusEntry{{X: 'R', Y: ' ', Path: "new name.txt", Orig: "old name.txt"}, {X: '?', Y: '?', Path: "z"}}},
		{"WI-11 rename in either column, copy", "RM a\x00b\x00 R c\x00d\x00C  e\x00f\x00 C g\x00h\x00",
			[]StatusEntry{
				{X: 'R', Y: 'M', Path: "a", Orig: "b"}, {X: ' ', Y: 'R', Path: "c", Orig: "d"},
				{X: 'C', Y: ' ', Path: "e", Orig: "f"}, {X: ' ', Y: 'C', Path: "g", Orig: "h"},
			}},
		{"rename orig that looks like an entry", "R  a\x00?? b\x00",
			[]StatusEntry{{X: 'R', Y: ' ', Path: "a", Orig: "?? b"}}},
		{"names with spaces, newline, unicode", "?? dir with space/na\u00efve\nfile \u2713.txt\x00 M  leading space\x00",
			[]StatusEntry{{X: '?', Y: '?', Path: "dir with space/na\u00efve\nfile \u2713.txt"}, {X: ' ', Y: 'M', Path: " leading space"}}},
		{"unmerged", "UU conflict.go\x00AA both.go\x00DU gone.go\x00",
			[]StatusEntry{{X: 'U', Y: 'U', Path: "conflict.go"}, {X: 'A', Y: 'A', Path: "both.go"}, {X: 'D', Y: 'U', Path: "gone.go"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatusZ([]byte(tt.in))
			if err != nil {
				t.Fatalf("ParseStatusZ: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestParseStatusZErrors: what does not parse is an error (the caller fails
// safe), never a silently dropped entry.
func TestParseStatusZErrors(t *testing.T) {
	for _, in := range []string{
		"?? unterminated",
		"M\x00",            // too short
		"?? \x00",          // empty path
		"??x\x00",          // no space
		"XY path\x00",      // unknown letters
		"R  new\x00",       // rename without its original path
		"R  new\x00\x00",   // empty original path
		"## main\x00",      // branch header: not requested, not accepted
		"1 .M N... a\x00",  // porcelain v2
		"?? a\x00 M\x00b",  // malformed in the middle
		"?? a\x00R  b\x00", // rename at the end without orig
	} {
		if got, err := ParseStatusZ([]byte(in)); err == nil {
			t.Errorf("ParseStatusZ(%q) = %q, want an error", in, got)
		}
	}
}

func TestParseNulList(t *testing.T) {
	got, err := parseNulList([]byte("a\x00b c\x00a\x00d\ne\x00"))
	if err != nil || !reflect.DeepEqual(got, []string{"a", "b c", "d\ne"}) {
		t.Errorf("parseNulList = %q, %v", got, err)
	}
	for _, in := range []string{"a", "a\x00\x00"} {
		if _, err := parseNulList([]byte(in)); err == nil {
			t.Errorf("parseNulList(%q): want an error", in)
		}
	}
}

// FuzzParseStatusZ: the parser never panics, and whatever it accepts
// re-encodes to exactly its input.
func FuzzParseStatusZ(f *testing.F) {
	f.Add([]byte(" M a\x00R  b\x00c\x00?? d e\x00!! f/\x00"))
	f.Add([]byte("RM x\x00y\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		entries, err := ParseStatusZ(in)
		if err != nil {
			return
		}
		var b bytes.Buffer
		for _, e := range entries {
			b.WriteByte(e.X)
			b.WriteByte(e.Y)
			b.WriteByte(' ')
			b.WriteString(e.Path)
			b.WriteByte(0)
			if e.Orig != "" {
				b.WriteString(e.Orig)
				b.WriteByte(0)
			}
			if strings.Contains(e.Path, "\x00") || e.Path == "" {
				t.Fatalf("bad path %q", e.Path)
			}
		}
		if !bytes.Equal(b.Bytes(), in) {
			t.Fatalf("round trip: %q -> %q", in, b.Bytes())
		}
	})
}

func BenchmarkParseStatusZ(b *testing.B) {
	var in bytes.Buffer
	for i := range 10000 {
		switch i % 4 {
		case 0:
			in.WriteString(" M src/pkg/file.go\x00")
		case 1:
			in.WriteString("?? build/output/artifact.o\x00")
		case 2:
			in.WriteString("R  new/path.go\x00old/path.go\x00")
		default:
			in.WriteString("!! node_modules/\x00")
		}
	}
	b.SetBytes(int64(in.Len()))
	for b.Loop() {
		if _, err := ParseStatusZ(in.Bytes()); err != nil {
			b.Fatal(err)
		}
	}
}
