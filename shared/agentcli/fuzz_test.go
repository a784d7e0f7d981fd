package agentcli

import (
	"bytes"
	"reflect"
	"testing"
)

// fuzzParser feeds arbitrary output to one adapter's parser: it must not
// panic, must be deterministic, and its Result must be consistent (a
// success has no class and no error; a failure has both, with a known
// class). The constructed fixtures of that adapter and format seed the
// corpus (issue 10: parsers fuzzed).
func fuzzParser(f *testing.F, adapter, format string) {
	a, _ := Lookup(adapter)
	for _, fx := range fixtures {
		if fx.adapter == adapter && fx.format == format {
			f.Add(readFixture(f, fx.stdout), readFixture(f, fx.stderr), fx.exit)
		}
	}
	f.Fuzz(func(t *testing.T, stdout, stderr []byte, exit int) {
		parse := func() Result {
			res, err := Parse(a.NewParser(Settings{OutputFormat: format}), bytes.NewReader(stdout), exit, stderr, func(Event) {})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		res := parse()
		if res.Success != (res.Class == "") || res.Success != (res.Error == "") {
			t.Fatalf("inconsistent result: success %v, class %q, error %q", res.Success, res.Class, res.Error)
		}
		switch res.Class {
		case "", Transient, Fatal, Agent:
		default:
			t.Fatalf("unknown class %q", res.Class)
		}
		if res.Adapter != adapter || res.ExitCode != exit {
			t.Fatalf("adapter, exit = %q, %d", res.Adapter, res.ExitCode)
		}
		if lines := bytes.Count(stdout, []byte("\n")) + 1; res.Malformed > lines {
			t.Fatalf("%d malformed of %d lines", res.Malformed, lines)
		}
		if again := parse(); !reflect.DeepEqual(res, again) {
			t.Fatalf("two parses differ:\n%+v\n%+v", res, again)
		}
	})
}

func FuzzClaudeStream(f *testing.F) { fuzzParser(f, "claude-code", "") }
func FuzzClaudeJSON(f *testing.F)   { fuzzParser(f, "claude-code", "json") }
func FuzzCodex(f *testing.F)        { fuzzParser(f, "codex", "") }
func FuzzGeminiStream(f *testing.F) { fuzzParser(f, "gemini", "") }
func FuzzGeminiJSON(f *testing.F)   { fuzzParser(f, "gemini", "json") }
