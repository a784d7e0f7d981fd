// Package scriptagent carries out the scripted directives of Supervisor's
// test agents: supervisor-test-agent and the stand-ins for the real CLIs
// (worker/internal/testcli) share it, so a prompt means the same to each.
//
// Directives, one per line, anywhere in the prompt:
//
//	@write PATH      the following lines, up to a line "@end", become PATH
//	@append PATH     the following lines, up to "@end", are appended to PATH
//	@delete PATH     remove PATH
//	@sleep DURATION  sleep (a Go duration, e.g. 2s)
//	@print TEXT      print TEXT (each agent shows printed text its own way)
//	@env NAME        print NAME=value of an environment variable
//	@fetch URL       GET URL the way the real CLIs reach their APIs (through
//	                 HTTPS_PROXY/HTTP_PROXY when set) and print
//	                 "fetch URL: STATUS" or "fetch URL: error: ..."; a
//	                 failure does not stop the agent
//	@exit CODE       stop here and exit with CODE
//	@api-error TEXT  stop here as a CLI does when its model's API fails (a
//	                 rate limit, an overloaded API): TEXT is the error's
//	                 text and the exit code is 1, e.g.
//	                 "@api-error API Error: 429 rate limit exceeded; retry-after: 4"
//	@print-feedback  print the feedback file's content, each line prefixed
//	                 "feedback| " ("feedback| none" without one)
//	@print-prompt    print the prompt as received, each line prefixed
//	                 "prompt| "
//	@signal PATH     create the empty file PATH, an absolute path outside
//	                 the workspace (agents that must run at once meet
//	                 through such files)
//	@await PATH      wait until the file PATH exists (at most two minutes;
//	                 then stop with exit code 1)
//	@reply           the following lines, up to "@end", are the agent's
//	                 final message (instead of the summary of what it did);
//	                 a later @reply replaces an earlier one
//
// Conditions, like a real agent acting on the feedback of a failed round:
// the directives between one of these and a line "@endif" run only when
//
//	@if-feedback TEXT   the feedback file (SUPERVISOR_FEEDBACK_FILE) holds TEXT
//	@if-no-feedback     there is no feedback: the first attempt
//	@if-note TEXT       the operator's note in the feedback holds TEXT
//	@if-file PATH TEXT  the file PATH (in the working directory) holds TEXT,
//	                    as a reviewer reads the code it reviews
//	@if-no-file PATH TEXT  the file PATH is missing or does not hold TEXT
//	@if-env NAME VALUE  the environment variable NAME is VALUE (e.g. the
//	                    SUPERVISOR_REVIEWER number of a review gate's reviewer)
//
// Conditions nest. Paths must be relative and stay inside the working
// directory.
package scriptagent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

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

// Change is a file a directive changed: Op is "write", "append" or
// "delete".
type Change struct {
	Op   string
	Path string
}

// Result is how a script ended.
type Result struct {
	// Summary is the agent's final text: what it did, or why it stopped.
	Summary string
	// Code is the exit code the agent should end with.
	Code int
	// APIError is set when @api-error stopped the script: Summary is then
	// the API error's text.
	APIError bool
	// Changes are the files changed, in order.
	Changes []Change
}

// Execute runs the prompt's directives in the working directory, writing
// what they print to out.
func Execute(prompt string, out io.Writer) Result {
	var done []string
	var changes []Change
	reply := ""
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
		case "@if-file", "@if-no-file":
			path, text, _ := strings.Cut(arg, " ")
			has := false
			if p, err := safePath(path); err == nil {
				data, err := os.ReadFile(p)
				has = err == nil && strings.Contains(string(data), strings.TrimSpace(text))
			}
			active = append(active, has == (directive == "@if-file"))
			continue
		case "@if-env":
			name, value, _ := strings.Cut(arg, " ")
			active = append(active, os.Getenv(name) == strings.TrimSpace(value))
			continue
		case "@endif":
			if len(active) > 0 {
				active = active[:len(active)-1]
			}
			continue
		}
		if !running() {
			if directive == "@write" || directive == "@append" || directive == "@reply" {
				for sc.Scan() { // skip the body
					if strings.TrimSpace(sc.Text()) == "@end" {
						break
					}
				}
			}
			continue
		}
		switch directive {
		case "@reply":
			var body strings.Builder
			for sc.Scan() {
				l := strings.TrimRight(sc.Text(), "\r")
				if strings.TrimSpace(l) == "@end" {
					break
				}
				body.WriteString(l + "\n")
			}
			reply = strings.TrimRight(body.String(), "\n")
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
				return Result{Summary: err.Error(), Code: 1, Changes: changes}
			}
			op := strings.TrimPrefix(directive, "@")
			done = append(done, op+" "+arg)
			changes = append(changes, Change{Op: op, Path: arg})
		case "@delete":
			p, err := safePath(arg)
			if err == nil {
				err = os.Remove(p)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return Result{Summary: err.Error(), Code: 1, Changes: changes}
			}
			done = append(done, "delete "+arg)
			changes = append(changes, Change{Op: "delete", Path: arg})
		case "@sleep":
			d, err := time.ParseDuration(arg)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bad @sleep:", err)
				return Result{Summary: err.Error(), Code: 2, Changes: changes}
			}
			time.Sleep(d)
		case "@signal":
			if err := os.WriteFile(arg, nil, 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return Result{Summary: err.Error(), Code: 1, Changes: changes}
			}
		case "@await":
			if err := await(arg, 2*time.Minute); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return Result{Summary: err.Error(), Code: 1, Changes: changes}
			}
		case "@print":
			fmt.Fprintln(out, arg)
		case "@env":
			fmt.Fprintf(out, "%s=%s\n", arg, os.Getenv(arg))
		case "@print-feedback":
			if !hasFeedback {
				fmt.Fprintln(out, "feedback| none")
			}
			printPrefixed(out, "feedback| ", fbText)
		case "@print-prompt":
			printPrefixed(out, "prompt| ", prompt)
		case "@fetch":
			fmt.Fprintf(out, "fetch %s: %s\n", arg, fetch(arg))
			done = append(done, "fetch "+arg)
		case "@api-error":
			// The real CLI reports a failed API call as its result (the
			// error's text) and exits 1; nothing after it runs.
			return Result{Summary: arg, Code: 1, APIError: true, Changes: changes}
		case "@exit":
			code, err := strconv.Atoi(arg)
			if err != nil {
				code = 1
			}
			return Result{Summary: fmt.Sprintf("exited with %d after: %s", code, strings.Join(done, ", ")), Code: code, Changes: changes}
		}
	}
	switch {
	case reply != "":
		return Result{Summary: reply, Changes: changes}
	case len(done) == 0:
		return Result{Summary: "nothing to do", Changes: changes}
	}
	return Result{Summary: "done: " + strings.Join(done, ", "), Changes: changes}
}

// await waits until the file path exists, or fails after limit.
func await(path string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("@await %s: no such file after %s", path, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// printPrefixed prints each line of text with prefix.
func printPrefixed(out io.Writer, prefix, text string) {
	if text == "" {
		return
	}
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintln(out, prefix+l)
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
