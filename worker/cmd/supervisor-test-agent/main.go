// Command supervisor-test-agent is a scripted stand-in for an AI coding
// CLI. It takes Claude Code's flags (-p/--print, --output-format
// text|json|stream-json, --model, --dangerously-skip-permissions, …), reads
// the prompt from standard input (or the last argument), carries out the
// directives the prompt contains, and prints its answer in the requested
// format, the way `claude -p --output-format json` does.
//
// The directives are those of package scriptagent (@write, @append,
// @delete, @sleep, @print, @env, @fetch, @exit, @api-error,
// @print-feedback, @print-prompt, and the @if-… conditions); what they
// print goes to standard output before the result.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/worker/internal/scriptagent"
)

func main() {
	fs := flag.NewFlagSet("claude", flag.ContinueOnError)
	printMode := fs.Bool("p", false, "print mode (non-interactive)")
	fs.BoolVar(printMode, "print", false, "print mode (non-interactive)")
	format := fs.String("output-format", "text", "text, json or stream-json")
	model := fs.String("model", "test-agent", "model name (reported only)")
	fs.Bool("dangerously-skip-permissions", false, "accepted and ignored")
	fs.Bool("verbose", false, "accepted and ignored")
	fs.String("permission-mode", "", "accepted and ignored")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	var prompt string
	if fs.NArg() > 0 {
		prompt = strings.Join(fs.Args(), " ")
	} else {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "read prompt:", err)
			os.Exit(2)
		}
		prompt = string(b)
	}
	start := time.Now()
	res := scriptagent.Execute(prompt, os.Stdout)
	emit(os.Stdout, *format, *model, res.Summary, res.Code, time.Since(start))
	os.Exit(res.Code)
}

// emit prints the answer to w the way Claude Code does for each output
// format.
func emit(w io.Writer, format, model, summary string, code int, took time.Duration) {
	result := map[string]any{
		"type": "result", "subtype": "success", "is_error": code != 0,
		"duration_ms": took.Milliseconds(), "duration_api_ms": 0, "num_turns": 1,
		"result": summary, "session_id": fmt.Sprintf("test-%d", os.Getpid()),
		"total_cost_usd": 0.0, "model": model,
		"usage": map[string]int{"input_tokens": 0, "output_tokens": 0},
	}
	if code != 0 {
		result["subtype"] = "error_during_execution"
	}
	switch format {
	case "json":
		b, _ := json.Marshal(result)
		fmt.Fprintln(w, string(b))
	case "stream-json":
		b, _ := json.Marshal(map[string]any{"type": "system", "subtype": "init", "model": model})
		fmt.Fprintln(w, string(b))
		b, _ = json.Marshal(result)
		fmt.Fprintln(w, string(b))
	default:
		fmt.Fprintln(w, summary)
	}
}
