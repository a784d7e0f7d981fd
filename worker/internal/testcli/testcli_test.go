package testcli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/supervisorhq/supervisor/shared/agentcli"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds the three stand-ins, once, under the real CLIs' names.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "testcli-bin-")
		if buildErr != nil {
			return
		}
		for _, name := range []string{"claude", "codex", "gemini"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, name), "./"+name).CombinedOutput()
			if err != nil {
				buildErr = errors.New(string(out))
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatalf("build the stand-ins: %v", buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// runCLI runs argv (argv[0] one of the stand-ins) in dir as the worker
// will: the prompt on stdin when the invocation says so, the null device
// otherwise.
func runCLI(t *testing.T, dir string, inv agentcli.Invocation) (stdout, stderr []byte, exit int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), inv.Argv[0]), inv.Argv[1:]...)
	cmd.Dir = dir
	if inv.PromptOnStdin {
		cmd.Stdin = strings.NewReader(inv.Stdin)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.Bytes(), e.Bytes(), exit
}

const fixtures = "../../../shared/agentcli/testdata/"

// editPrompt writes a file, as the success fixtures do.
const editPrompt = "fix the greeting\n@write greet.py\nprint(\"hello\")\n@end\n"

// TestStandInsEditAFile runs each stand-in with the adapter's real argv and
// a prompt that edits a file: the file changes, and the adapter parses the
// output into the Result it gives for the success fixture (the same
// fields reported and missing), each output line shaped like the fixture's
// line of that kind, keys in the same order (WORK-03, WORK-07, WORK-08).
func TestStandInsEditAFile(t *testing.T) {
	tests := []struct {
		adapter string
		s       agentcli.Settings
		fixture string
		json    bool // one JSON document rather than JSON lines
	}{
		{adapter: "claude-code", s: agentcli.Settings{Model: "claude-sonnet-4-5-20250929", MaxTurns: 5}, fixture: "claude_stream_success_edit.jsonl"},
		{adapter: "claude-code", s: agentcli.Settings{OutputFormat: "json"}, fixture: "claude_json_success.json"},
		{adapter: "claude-code", s: agentcli.Settings{OutputFormat: "json", Args: []string{"--verbose"}}, fixture: "claude_json_array_success.json", json: true},
		{adapter: "codex", s: agentcli.Settings{Model: "gpt-5-codex"}, fixture: "codex_success_edit.jsonl"},
		{adapter: "gemini", s: agentcli.Settings{Model: "gemini-2.5-pro"}, fixture: "gemini_stream_success_edit.jsonl"},
		{adapter: "gemini", s: agentcli.Settings{OutputFormat: "json"}, fixture: "gemini_json_success.json", json: true},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			a, _ := agentcli.Lookup(tt.adapter)
			inv, err := a.Invocation(editPrompt, tt.s)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			stdout, stderr, exit := runCLI(t, dir, inv)
			if exit != 0 {
				t.Fatalf("exit %d\nstderr: %s", exit, stderr)
			}
			if got, err := os.ReadFile(filepath.Join(dir, "greet.py")); err != nil || string(got) != "print(\"hello\")\n" {
				t.Errorf("greet.py = %q, %v", got, err)
			}
			res, err := agentcli.Parse(a.NewParser(tt.s), bytes.NewReader(stdout), exit, stderr, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := agentcli.Parse(a.NewParser(tt.s), bytes.NewReader(mustRead(t, fixtures+tt.fixture)), 0, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Success || !strings.Contains(res.Text, "write greet.py") || res.SessionID == "" || res.Malformed != 0 ||
				res.Usage.InputTokens == 0 || (res.Model == "") != (want.Model == "") {
				t.Errorf("result = %+v", res)
			}
			if !slices.Equal(res.Missing, want.Missing) || res.CostReported != want.CostReported {
				t.Errorf("missing %q, cost reported %v; the fixture's: %q, %v", res.Missing, res.CostReported, want.Missing, want.CostReported)
			}
			if tt.json {
				sameShape(t, stdout, mustRead(t, fixtures+tt.fixture))
			} else {
				sameLines(t, stdout, mustRead(t, fixtures+tt.fixture))
			}
		})
	}
}

// TestStandInsFail checks the stand-ins' failures against the adapters'
// classes: an API rate limit is transient, a turn limit the agent's,
// unknown flags fatal, each with the real CLI's exit code (RETRY-04).
func TestStandInsFail(t *testing.T) {
	const rateLimit = "@write a.txt\nx\n@end\n@api-error API Error: 429 Too Many Requests\n"
	tests := []struct {
		name     string
		adapter  string
		s        agentcli.Settings
		prompt   string
		argv     []string // replaces the adapter's argv when set
		exit     int
		class    agentcli.Class
		errText  string
		sameAs   string // a fixture whose output lines the stand-in's must be shaped like
		noOutput bool
	}{
		{name: "claude rate limit", adapter: "claude-code", prompt: rateLimit, exit: 1, class: agentcli.Transient,
			errText: "429", sameAs: "claude_stream_auth_error.jsonl"},
		{name: "claude max turns", adapter: "claude-code", s: agentcli.Settings{MaxTurns: 1, OutputFormat: "json"},
			prompt: "@write a\n1\n@end\n@write b\n2\n@end\n", exit: 1, class: agentcli.Agent, errText: "error_max_turns: Reached maximum number of turns (1)"},
		{name: "claude unknown flag", adapter: "claude-code", s: agentcli.Settings{Args: []string{"--bogus"}}, prompt: "x",
			exit: 1, class: agentcli.Fatal, errText: "unknown option '--bogus'", noOutput: true},
		{name: "claude stream-json without --verbose", adapter: "claude-code", prompt: "x",
			argv: []string{"claude", "-p", "--output-format", "stream-json"}, exit: 1, class: agentcli.Fatal, errText: "requires --verbose", noOutput: true},
		{name: "codex rate limit", adapter: "codex", prompt: rateLimit, exit: 1, class: agentcli.Transient,
			errText: "429 Too Many Requests", sameAs: "codex_turn_failed_ratelimit.jsonl"},
		{name: "codex unknown flag", adapter: "codex", s: agentcli.Settings{Args: []string{"--ask-for-approval", "never"}}, prompt: "x",
			exit: 2, class: agentcli.Fatal, errText: "unexpected argument '--ask-for-approval'", noOutput: true},
		{name: "codex outside a git repository without --skip-git-repo-check", adapter: "codex", prompt: "x",
			argv: []string{"codex", "exec", "--json", "-"}, exit: 1, class: agentcli.Fatal, errText: "Not inside a trusted directory", noOutput: true},
		{name: "gemini rate limit", adapter: "gemini", prompt: rateLimit, exit: 173, class: agentcli.Transient,
			errText: "429", sameAs: "gemini_stream_rate_limit.jsonl"},
		{name: "gemini turn limit", adapter: "gemini", prompt: "@exit 53\n", exit: 53, class: agentcli.Agent,
			errText: "FatalTurnLimitedError", sameAs: "gemini_stream_turn_limit.jsonl"},
		{name: "gemini json error on stderr", adapter: "gemini", s: agentcli.Settings{OutputFormat: "json"}, prompt: "@exit 41\n",
			exit: 41, class: agentcli.Fatal, errText: "FatalAuthenticationError", noOutput: true},
		{name: "gemini unknown flag", adapter: "gemini", s: agentcli.Settings{Args: []string{"--bogus"}}, prompt: "x",
			exit: 1, class: agentcli.Fatal, errText: "Unknown argument: bogus", noOutput: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := agentcli.Lookup(tt.adapter)
			inv, err := a.Invocation(tt.prompt, tt.s)
			if err != nil {
				t.Fatal(err)
			}
			if tt.argv != nil {
				inv.Argv = tt.argv
			}
			stdout, stderr, exit := runCLI(t, t.TempDir(), inv)
			if exit != tt.exit {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", exit, tt.exit, stdout, stderr)
			}
			if tt.noOutput != (len(stdout) == 0) {
				t.Errorf("stdout = %q", stdout)
			}
			res, err := agentcli.Parse(a.NewParser(tt.s), bytes.NewReader(stdout), exit, stderr, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Success || res.Class != tt.class || !strings.Contains(res.Error, tt.errText) {
				t.Errorf("success %v, class %q, error %q; want class %q, error with %q", res.Success, res.Class, res.Error, tt.class, tt.errText)
			}
			if tt.sameAs != "" {
				sameLines(t, stdout, mustRead(t, fixtures+tt.sameAs))
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kind names a line's kind: its type, subtype, role, item type, and
// whether it is an error message.
func kind(m map[string]any) string {
	k := []string{str(m["type"]), str(m["subtype"]), str(m["role"])}
	if item, ok := m["item"].(map[string]any); ok {
		k = append(k, str(item["type"]))
	}
	if _, ok := m["error"]; ok {
		k = append(k, "error")
	}
	if m["is_error"] == true {
		k = append(k, "is_error")
	}
	return strings.Join(k, "/")
}

func str(v any) string { s, _ := v.(string); return s }

// sameLines checks that every line of got that has a line of the same kind
// in the fixture has its keys in the same order, and that most lines do.
func sameLines(t *testing.T, got, fixture []byte) {
	t.Helper()
	shapes := map[string][]string{}
	for _, l := range bytes.Split(bytes.TrimSpace(fixture), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil {
			shapes[kind(m)] = keys(t, l)
		}
	}
	matched, lines := 0, bytes.Split(bytes.TrimSpace(got), []byte("\n"))
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Errorf("line is not a JSON object: %s", l)
			continue
		}
		want, ok := shapes[kind(m)]
		if !ok {
			continue
		}
		matched++
		if got := keys(t, l); !slices.Equal(got, want) {
			t.Errorf("%s line keys\n got %q\nwant %q", kind(m), got, want)
		}
	}
	if matched*2 < len(lines) {
		t.Errorf("only %d of %d lines have a line of their kind in the fixture", matched, len(lines))
	}
}

// sameShape checks that got, one JSON document, has the fixture's keys in
// the fixture's order (and its indentation, for an indented fixture).
func sameShape(t *testing.T, got, fixture []byte) {
	t.Helper()
	if g, w := keys(t, got), keys(t, fixture); !slices.Equal(g, w) {
		t.Errorf("keys\n got %q\nwant %q", g, w)
	}
	if bytes.HasPrefix(fixture, []byte("{\n  ")) != bytes.HasPrefix(got, []byte("{\n  ")) {
		t.Errorf("indentation differs from the fixture's:\n%.80s", got)
	}
}

// dynamic are the objects whose keys are data (model and tool names,
// tool inputs), not part of the format.
var dynamic = map[string]bool{"modelUsage": true, "models": true, "byName": true, "input": true, "parameters": true, "errorsByType": true}

// keys lists a JSON value's object keys as paths, in document order;
// arrays contribute the keys of their first object only when it is the
// top level (the json array output), and dynamic objects none.
func keys(t *testing.T, doc []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	var out []string
	var walk func(path string, top bool) error
	walk = func(path string, top bool) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch d := tok.(type) {
		case json.Delim:
			switch d {
			case '{':
				for dec.More() {
					kt, err := dec.Token()
					if err != nil {
						return err
					}
					k := kt.(string)
					if dynamic[path] || strings.HasSuffix(path, "."+lastSeg(path)) && dynamic[lastSeg(path)] {
						if err := skip(dec); err != nil {
							return err
						}
						continue
					}
					p := k
					if path != "" {
						p = path + "." + k
					}
					out = append(out, p)
					if dynamic[k] {
						if err := skip(dec); err != nil {
							return err
						}
						continue
					}
					if err := walk(p, false); err != nil {
						return err
					}
				}
				_, err = dec.Token()
				return err
			case '[':
				i := 0
				for dec.More() {
					if top {
						if err := walk(path+"["+string(rune('0'+i%10))+"]", false); err != nil {
							return err
						}
					} else if err := skip(dec); err != nil {
						return err
					}
					i++
				}
				_, err = dec.Token()
				return err
			}
		}
		return nil
	}
	if err := walk("", true); err != nil {
		t.Fatalf("keys of %.80s: %v", doc, err)
	}
	return out
}

func lastSeg(p string) string { return p[strings.LastIndex(p, ".")+1:] }

// skip reads one whole value.
func skip(dec *json.Decoder) error {
	var v json.RawMessage
	return dec.Decode(&v)
}
