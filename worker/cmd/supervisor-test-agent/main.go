// Command supervisor-test-agent is a scripted stand-in for an AI coding
// CLI. It takes Claude Code's flags (-p/--print, --output-format
// text|json|stream-json, --model, --dangerously-skip-permissions, …), reads
// the prompt from standard input (or the last argument), carries out the
// directives the prompt contains, and prints its answer in the requested
// format, the way `claude -p --output-format json` does.
//
// Directives, one per line, anywhere in the prompt:
//
//	@write PATH      the following lines, up to a line "@end", become PATH
//	@append PATH     the following lines, up to "@end", are appended to PATH
//	@delete PATH     remove PATH
//	@sleep DURATION  sleep (a Go duration, e.g. 2s)
//	@print TEXT      print TEXT on stdout before the result
//	@env NAME        print NAME=value of an environment variable on stdout
//	@fetch URL       GET URL the way the real CLIs reach their APIs (through
//	                 HTTPS_PROXY/HTTP_PROXY when set) and print
//	                 "fetch URL: STATUS" or "fetch URL: error: ..."; a
//	                 failure does not stop the agent
//	@exit CODE       stop here and exit with CODE (is_error in the JSON)
//	@api-error TEXT  stop here as the CLI does when its model's API fails (a
//	                 rate limit, an overloaded API): TEXT is the result, with
//	                 is_error set, and the exit code is 1, e.g.
//	                 "@api-error API Error: 429 rate limit exceeded; retry-after: 4"
//	@print-feedback  print the feedback file's content on stdout, each line
//	                 prefixed "feedback| " ("feedback| none" without one)
//	@print-prompt    print the prompt as received on stdout, each line
//	                 prefixed "prompt| "
//
// Conditions, like a real agent acting on the feedback of a failed round:
// the directives between one of these and a line "@endif" run only when
//
//	@if-feedback TEXT   the feedback file (SUPERVISOR_FEEDBACK_FILE) holds TEXT
//	@if-no-feedback     there is no feedback: the first attempt
//	@if-note TEXT       the operator's note in the feedback holds TEXT
//
// Conditions nest. Paths must be relative and stay inside the working
// directory.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	summary, code := execute(prompt)
	emit(os.Stdout, *format, *model, summary, code, time.Since(start))
	os.Exit(code)
}

// feedback reads the feedback file of a retry: its text, and the
// operator's note in it ("" and false on a first attempt).
func feedback() (text, note string, ok bool) {
	path := os.Getenv("SUPERVISOR_FEEDBACK_FILE")
	if path == "" {
		return "", "", false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "read feedback:", err)
		return "", "", false
	}
	var doc struct {
		Note *struct {
			Text string `json:"text"`
		} `json:"note"`
	}
	if json.Unmarshal(data, &doc) == nil && doc.Note != nil {
		note = doc.Note.Text
	}
	return string(data), note, true
}

// execute runs the prompt's directives and returns a summary and exit code.
func execute(prompt string) (string, int) {
	var done []string
	fbText, fbNote, hasFeedback := feedback()
	// active holds, for each open condition, whether its directives run.
	var active []bool
	running := func() bool {
		for _, a := range active {
			if !a {
				return false
			}
		}
		return true
	}
	sc := bufio.NewScanner(strings.NewReader(prompt))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		directive, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
		arg = strings.TrimSpace(arg)
		switch directive {
		case "@if-feedback":
			active = append(active, hasFeedback && strings.Contains(fbText, arg))
			continue
		case "@if-no-feedback":
			active = append(active, !hasFeedback)
			continue
		case "@if-note":
			active = append(active, fbNote != "" && strings.Contains(fbNote, arg))
			continue
		case "@endif":
			if len(active) > 0 {
				active = active[:len(active)-1]
			}
			continue
		}
		if !running() {
			if directive == "@write" || directive == "@append" {
				for sc.Scan() { // skip the body
					if strings.TrimSpace(sc.Text()) == "@end" {
						break
					}
				}
			}
			continue
		}
		switch directive {
		case "@write", "@append":
			var body strings.Builder
			for sc.Scan() {
				l := strings.TrimRight(sc.Text(), "\r")
				if strings.TrimSpace(l) == "@end" {
					break
				}
				body.WriteString(l + "\n")
			}
			if err := writeFile(arg, body.String(), directive == "@append"); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return err.Error(), 1
			}
			done = append(done, strings.TrimPrefix(directive, "@")+" "+arg)
		case "@delete":
			p, err := safePath(arg)
			if err == nil {
				err = os.Remove(p)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return err.Error(), 1
			}
			done = append(done, "delete "+arg)
		case "@sleep":
			d, err := time.ParseDuration(arg)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bad @sleep:", err)
				return err.Error(), 2
			}
			time.Sleep(d)
		case "@print":
			fmt.Println(arg)
		case "@env":
			fmt.Printf("%s=%s\n", arg, os.Getenv(arg))
		case "@print-feedback":
			if !hasFeedback {
				fmt.Println("feedback| none")
			}
			printPrefixed("feedback| ", fbText)
		case "@print-prompt":
			printPrefixed("prompt| ", prompt)
		case "@fetch":
			fmt.Printf("fetch %s: %s\n", arg, fetch(arg))
			done = append(done, "fetch "+arg)
		case "@api-error":
			// The real CLI reports a failed API call as its result (the
			// error's text) and exits 1; nothing after it runs.
			return arg, 1
		case "@exit":
			code, err := strconv.Atoi(arg)
			if err != nil {
				code = 1
			}
			return fmt.Sprintf("exited with %d after: %s", code, strings.Join(done, ", ")), code
		}
	}
	if len(done) == 0 {
		return "nothing to do", 0
	}
	return "done: " + strings.Join(done, ", "), 0
}

// printPrefixed prints each line of text with prefix.
func printPrefixed(prefix, text string) {
	if text == "" {
		return
	}
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Println(prefix + l)
	}
}

func safePath(p string) (string, error) {
	if p == "" || filepath.IsAbs(p) {
		return "", fmt.Errorf("path %q must be relative", p)
	}
	clean := filepath.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("path %q leaves the working directory", p)
	}
	return clean, nil
}

func writeFile(p, body string, appendTo bool) error {
	path, err := safePath(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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

// fetch GETs url through the environment's proxy settings, as the real
// CLIs do, and describes the outcome.
func fetch(url string) string {
	c := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{Proxy: http.ProxyFromEnvironment},
	}
	resp, err := c.Get(url)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.Status
}
