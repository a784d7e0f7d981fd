// Command codex is a scripted stand-in for the Codex CLI, for tests only:
// built under the name codex, it takes `exec` with the flags the codex
// adapter passes (and more of the real ones), rejects unknown ones as
// clap does (exit 2), reads its prompt as exec does ("-" or no prompt:
// standard input; a prompt and a piped stdin: both), refuses to run
// outside a git repository without --skip-git-repo-check, carries out the
// prompt's directives (package scriptagent) and prints exec's --json
// events (or, without --json, the final message). An @api-error ends the
// turn with turn.failed, as exec reports a failed API call; exit 1.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/supervisorhq/supervisor/worker/internal/scriptagent"
	"github.com/supervisorhq/supervisor/worker/internal/testcli"
)

var sandboxes = []string{"read-only", "workspace-write", "danger-full-access"}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "exec" {
		fmt.Fprintln(stderr, "error: this stand-in runs `codex exec` only")
		return 2
	}
	f := testcli.Flags{
		Bool: map[string]string{"--json": "json", "--experimental-json": "json", "--skip-git-repo-check": "skip-git",
			"--ephemeral": "ephemeral", "--full-auto": "full-auto", "--dangerously-bypass-approvals-and-sandbox": "yolo",
			"--yolo": "yolo", "--oss": "oss", "--ignore-user-config": "ignore-user-config", "--ignore-rules": "ignore-rules"},
		Value: map[string]string{"-m": "model", "--model": "model", "-s": "sandbox", "--sandbox": "sandbox",
			"-C": "cd", "--cd": "cd", "--add-dir": "add-dir", "-p": "profile", "--profile": "profile", "-c": "config",
			"--config": "config", "--color": "color", "-o": "last-message", "--output-last-message": "last-message",
			"--output-schema": "output-schema", "-i": "image", "--image": "image"},
	}
	if err := f.Parse(args[1:]); err != nil {
		if u, ok := err.(*testcli.ErrUnknown); ok {
			fmt.Fprintf(stderr, "error: unexpected argument '%s' found\n", u.Arg)
		} else {
			fmt.Fprintf(stderr, "error: %v\n", err)
		}
		return 2
	}
	if sb := f.Get("sandbox"); sb != "" && !contains(sandboxes, sb) {
		fmt.Fprintf(stderr, "error: invalid value '%s' for '--sandbox <SANDBOX_MODE>'\n  [possible values: %s]\n", sb, strings.Join(sandboxes, ", "))
		return 2
	}
	if f.Has("full-auto") {
		fmt.Fprintln(stderr, "warning: `--full-auto` is deprecated; use `--sandbox workspace-write` instead.")
	}
	if dir := f.Get("cd"); dir != "" {
		if err := os.Chdir(dir); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	if !f.Has("skip-git") && !f.Has("yolo") && !inGitRepo() {
		fmt.Fprintln(stderr, "Not inside a trusted directory and --skip-git-repo-check was not specified.")
		return 1
	}
	if len(f.Args) > 1 {
		fmt.Fprintf(stderr, "error: unexpected argument '%s' found\n", f.Args[1])
		return 2
	}
	prompt, code := readPrompt(f.Args, stderr)
	if code != 0 {
		return code
	}
	return turn(prompt, f.Has("json"), f.Get("last-message"), stdout)
}

// readPrompt resolves the prompt as exec does.
func readPrompt(args []string, stderr io.Writer) (string, int) {
	piped := testcli.StdinPiped()
	switch {
	case len(args) == 1 && args[0] == "-":
		b, _ := io.ReadAll(os.Stdin)
		if strings.TrimSpace(string(b)) == "" {
			fmt.Fprintln(stderr, "No prompt provided via stdin.")
			return "", 1
		}
		return string(b), 0
	case len(args) == 1:
		if !piped {
			return args[0], 0
		}
		fmt.Fprintln(stderr, "Reading additional input from stdin...")
		b, _ := io.ReadAll(os.Stdin)
		if strings.TrimSpace(string(b)) == "" {
			return args[0], 0
		}
		return args[0] + "\n\n<stdin>\n" + string(b) + "\n</stdin>", 0
	case piped:
		fmt.Fprintln(stderr, "Reading prompt from stdin...")
		b, _ := io.ReadAll(os.Stdin)
		if strings.TrimSpace(string(b)) == "" {
			fmt.Fprintln(stderr, "No prompt provided via stdin.")
			return "", 1
		}
		return string(b), 0
	default:
		fmt.Fprintln(stderr, "No prompt provided. Either specify one as an argument or pipe the prompt into stdin.")
		return "", 1
	}
}

// turn runs one turn and prints its events.
func turn(prompt string, jsonOut bool, lastMessage string, stdout io.Writer) int {
	ev := func(v any) {
		if jsonOut {
			testcli.WriteLine(stdout, v)
		}
	}
	ev(threadStarted{Type: "thread.started", ThreadID: testcli.UUID()})
	ev(typeOnly{Type: "turn.started"})
	var printed strings.Builder
	ran := scriptagent.Execute(prompt, &printed)
	n := 0
	next := func() string { n++; return fmt.Sprintf("item_%d", n-1) }
	if printed.Len() > 0 {
		ev(itemEvent{Type: "item.completed", Item: textItem{ID: next(), Type: "agent_message", Text: strings.TrimRight(printed.String(), "\n")}})
	}
	for _, c := range ran.Changes {
		abs, _ := filepath.Abs(c.Path)
		kind := map[string]string{"write": "add", "append": "update", "delete": "delete"}[c.Op]
		ev(itemEvent{Type: "item.completed", Item: fileChange{ID: next(), Type: "file_change",
			Changes: []change{{Path: abs, Kind: kind}}, Status: "completed"}})
	}
	if ran.APIError || ran.Code != 0 {
		msg := ran.Summary
		if ran.APIError {
			ev(errorEvent{Type: "error", Message: msg})
		}
		ev(turnFailed{Type: "turn.failed", Error: errorMessage{Message: msg}})
		if !jsonOut {
			fmt.Fprintln(os.Stderr, "ERROR: "+msg)
		}
		return 1
	}
	ev(itemEvent{Type: "item.completed", Item: textItem{ID: next(), Type: "agent_message", Text: ran.Summary}})
	ev(turnCompleted{Type: "turn.completed", Usage: usage{InputTokens: testcli.Tokens(prompt), OutputTokens: testcli.Tokens(ran.Summary)}})
	if !jsonOut {
		fmt.Fprintln(stdout, ran.Summary)
	}
	if lastMessage != "" {
		if err := os.WriteFile(lastMessage, []byte(ran.Summary), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// inGitRepo reports whether the working directory is inside a git
// repository.
func inGitRepo() bool {
	dir, err := os.Getwd()
	if err != nil {
		return false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
			return true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return false
		}
		dir = parent
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// The events, their fields in the order exec prints them.
type threadStarted struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
}

type typeOnly struct {
	Type string `json:"type"`
}

type itemEvent struct {
	Type string `json:"type"`
	Item any    `json:"item"`
}

type textItem struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Text string `json:"text"`
}

type change struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}

type fileChange struct {
	ID      string   `json:"id"`
	Type    string   `json:"type"`
	Changes []change `json:"changes"`
	Status  string   `json:"status"`
}

type usage struct {
	InputTokens       int64 `json:"input_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
}

type turnCompleted struct {
	Type  string `json:"type"`
	Usage usage  `json:"usage"`
}

type errorMessage struct {
	Message string `json:"message"`
}

type turnFailed struct {
	Type  string       `json:"type"`
	Error errorMessage `json:"error"`
}

type errorEvent struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}
