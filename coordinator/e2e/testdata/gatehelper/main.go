// Command gatehelper is the e2e tests' gate command: a few scripted steps,
// run in order, so that gates need no shell. Each step is a word and its
// arguments:
//
//	exit N                 exit with status N now
//	sleep DURATION         sleep (a Go duration)
//	pending-until FILE     exit 75 (pending) unless FILE exists
//	flaky STATE N          fail (exit 1) on the first N runs, counted in STATE
//	write PATH TEXT        write TEXT and a newline to PATH (directories made)
//	append PATH            append "<workflow> <node> <gate> <attempt>" to PATH
//	wait-file FILE TIMEOUT wait until FILE exists; exit 1 after TIMEOUT
//	touch-git NAME         set the mtime of `git rev-parse --git-path NAME`
//	unexpanded ARG...      exit 1 unless every ARG still starts with '$'
//	print TEXT             print TEXT on stdout
//	cat PATH               print the content of PATH on stdout
//	env NAME               print NAME=value of an environment variable
//	expect PATH TEXT       exit 1 unless PATH holds the line TEXT, printing
//	                       "gatehelper: PATH holds X, want TEXT"
//	distinct DIR           exit 1 unless the files in DIR hold different
//	                       values, printing "gatehelper: DIR/X and DIR/Y
//	                       both hold V"
//
// A PATH, FILE or STATE written "env:NAME" is taken from the environment
// variable NAME. Relative paths are relative to the working directory, the
// gate's workspace.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	args := os.Args[1:]
	for len(args) > 0 {
		step := args[0]
		need := map[string]int{"exit": 1, "sleep": 1, "pending-until": 1, "flaky": 2, "write": 2,
			"append": 1, "wait-file": 2, "touch-git": 1, "print": 1, "cat": 1, "env": 1, "expect": 2,
			"distinct": 1}
		n, known := need[step]
		if step == "unexpanded" {
			n, known = len(args)-1, true
		}
		if !known || len(args) < n+1 {
			fail("unknown step or missing arguments: %q", args)
		}
		a := args[1 : n+1]
		args = args[n+1:]
		switch step {
		case "exit":
			code, err := strconv.Atoi(a[0])
			if err != nil {
				fail("exit %q: %v", a[0], err)
			}
			fmt.Printf("gatehelper: exit %d\n", code)
			os.Exit(code)
		case "sleep":
			d, err := time.ParseDuration(a[0])
			if err != nil {
				fail("sleep %q: %v", a[0], err)
			}
			time.Sleep(d)
		case "pending-until":
			if _, err := os.Stat(path(a[0])); err != nil {
				fmt.Println("gatehelper: still waiting for the external check")
				os.Exit(75)
			}
			fmt.Println("gatehelper: the external check is done")
		case "flaky":
			state := path(a[0])
			limit, err := strconv.Atoi(a[1])
			if err != nil {
				fail("flaky %q: %v", a[1], err)
			}
			b, _ := os.ReadFile(state)
			runs, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			runs++
			if err := os.WriteFile(state, []byte(strconv.Itoa(runs)), 0o644); err != nil {
				fail("flaky: %v", err)
			}
			if runs <= limit {
				fmt.Printf("gatehelper: flaky failure on run %d\n", runs)
				os.Exit(1)
			}
			fmt.Printf("gatehelper: flaky pass on run %d\n", runs)
		case "write":
			p := path(a[0])
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				fail("write: %v", err)
			}
			if err := os.WriteFile(p, []byte(a[1]+"\n"), 0o644); err != nil {
				fail("write: %v", err)
			}
		case "append":
			line := fmt.Sprintf("%s %s %s %s\n", os.Getenv("SUPERVISOR_WORKFLOW_ID"), os.Getenv("SUPERVISOR_NODE_ID"),
				os.Getenv("SUPERVISOR_GATE_NAME"), os.Getenv("SUPERVISOR_ATTEMPT"))
			f, err := os.OpenFile(path(a[0]), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				fail("append: %v", err)
			}
			if _, err := f.WriteString(line); err != nil {
				fail("append: %v", err)
			}
			if err := f.Close(); err != nil {
				fail("append: %v", err)
			}
		case "wait-file":
			d, err := time.ParseDuration(a[1])
			if err != nil {
				fail("wait-file %q: %v", a[1], err)
			}
			deadline := time.Now().Add(d)
			for {
				if _, err := os.Stat(path(a[0])); err == nil {
					break
				}
				if time.Now().After(deadline) {
					fail("wait-file: %s did not appear within %s", path(a[0]), d)
				}
				time.Sleep(50 * time.Millisecond)
			}
		case "touch-git":
			out, err := exec.Command("git", "rev-parse", "--git-path", a[0]).Output()
			if err != nil {
				fail("touch-git: git rev-parse: %v", err)
			}
			p := strings.TrimSpace(string(out))
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(p, later, later); err != nil {
				fail("touch-git: %v", err)
			}
			fmt.Printf("gatehelper: touched %s\n", p)
		case "unexpanded":
			for _, x := range a {
				if !strings.HasPrefix(x, "$") {
					fail("argument %q was expanded: a shell ran the command", x)
				}
			}
			fmt.Printf("gatehelper: arguments arrived as written: %q\n", a)
		case "print":
			fmt.Println(a[0])
		case "cat":
			b, err := os.ReadFile(path(a[0]))
			if err != nil {
				fail("cat: %v", err)
			}
			os.Stdout.Write(b)
		case "env":
			fmt.Printf("%s=%s\n", a[0], os.Getenv(a[0]))
		case "expect":
			b, err := os.ReadFile(path(a[0]))
			got := strings.TrimSuffix(string(b), "\n")
			if err != nil {
				got = "nothing (" + err.Error() + ")"
			}
			if got != a[1] {
				fmt.Printf("gatehelper: %s holds %s, want %s\n", a[0], got, a[1])
				os.Exit(1)
			}
			fmt.Printf("gatehelper: %s holds %s\n", a[0], got)
		case "distinct":
			distinct(path(a[0]))
		}
	}
}

// distinct exits 1 unless the files in dir hold different values.
func distinct(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		fail("distinct: %v", err)
	}
	owner := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			fail("distinct: %v", err)
		}
		v := strings.TrimSpace(string(b))
		if first, dup := owner[v]; dup {
			fmt.Printf("gatehelper: %s/%s and %s/%s both hold %s\n", dir, first, dir, e.Name(), v)
			os.Exit(1)
		}
		owner[v] = e.Name()
	}
	fmt.Printf("gatehelper: the %d files in %s hold different values\n", len(entries), dir)
}

// path resolves "env:NAME" to the variable's value.
func path(p string) string {
	if name, ok := strings.CutPrefix(p, "env:"); ok {
		return os.Getenv(name)
	}
	return p
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gatehelper: "+format+"\n", args...)
	os.Exit(1)
}
