package agentoutput

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzExtract feeds arbitrary messages to Extract and Parse: they must not
// panic, must be deterministic, and a block Extract returns is valid JSON;
// every error is ErrNoBlock or an *InvalidError (OUT-06).
func FuzzExtract(f *testing.F) {
	for _, name := range Names {
		f.Add(Instructions(name))
	}
	for _, s := range []string{"", "{", "}{", "```json\n{\"a\":1}\n```", "```\n~~~json\n{}\n", `{"a":"\"}"}`, "````\n```json\n{}\n````"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		block, err := Extract(text)
		again, err2 := Extract(text)
		if string(block) != string(again) || (err == nil) != (err2 == nil) {
			t.Fatal("Extract is not deterministic")
		}
		switch {
		case err == nil:
			if !json.Valid(block) {
				t.Fatalf("Extract returned invalid JSON %q", block)
			}
		case !errors.Is(err, ErrNoBlock) && !errors.Is(err, ErrInvalid):
			t.Fatalf("Extract error of no known kind: %v", err)
		}
		for _, name := range Names {
			out, err := Parse(name, text)
			if err == nil && (out.Schema != name || out.Status() == "") {
				t.Fatalf("Parse(%s) = %+v", name, out)
			}
			if err != nil && !errors.Is(err, ErrNoBlock) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%s) error of no known kind: %v", name, err)
			}
		}
	})
}
