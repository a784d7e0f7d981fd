package main

import (
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

// pipeWith returns the read end of a pipe holding s, closed for writing.
func pipeWith(t *testing.T, s string) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if _, err := io.WriteString(w, s); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return r
}

// TestReadJob (PERF-72): the job is read to its length and not a byte
// further, the rest being the command's input; a length that is not one,
// or over the limit, or a job cut short, is refused.
func TestReadJob(t *testing.T) {
	for _, tt := range []struct {
		in, job, rest, err string
	}{
		{in: "2\n{}the command's input", job: "{}", rest: "the command's input"},
		{in: "0\n", job: "", rest: ""},
		{in: "\n{}", err: "not a number"},
		{in: "x\n{}", err: "not a number"},
		{in: "1234567890\n", err: "not a number"},
		{in: "9\n{}", err: "the job"},
		{in: "", err: "no job"},
		{in: "65\n" + strings.Repeat("x", 65), err: "over the limit"},
	} {
		r := pipeWith(t, tt.in)
		job, err := readJob(r, 64)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("readJob(%q): %q, %v; want an error with %q", tt.in, job, err, tt.err)
			}
			continue
		}
		rest, _ := io.ReadAll(r)
		if err != nil || string(job) != tt.job || string(rest) != tt.rest {
			t.Errorf("readJob(%q) = %q, %v, rest %q; want %q, rest %q", tt.in, job, err, rest, tt.job, tt.rest)
		}
	}
}

// TestOverlay: the job's variables replace the image's of the same name
// and keep their order after the others.
func TestOverlay(t *testing.T) {
	got := overlay([]string{"PATH=/image", "HOME=/root", "LANG=C"}, []string{"HOME=/tmp", "GOCACHE=/tmp/go"})
	want := []string{"PATH=/image", "LANG=C", "HOME=/tmp", "GOCACHE=/tmp/go"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("overlay = %v, want %v", got, want)
	}
}
