// Package testcli holds what the scripted stand-ins for the real agent
// CLIs share. The stand-ins (claude/, codex/ and gemini/ below, each built
// under the real binary's name, for tests only) accept the real CLI's
// headless flags, reject unknown ones the way it does, carry out the
// prompt's directives with package scriptagent, and print their output in
// the CLI's format, shaped like the fixtures in shared/agentcli/testdata.
package testcli

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// WriteLine writes v as one compact JSON line, without HTML escaping (the
// CLIs print "<" as is).
func WriteLine(w io.Writer, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	_, _ = w.Write(b.Bytes())
}

// WriteIndented writes v as 2-space indented JSON and a newline.
func WriteIndented(w io.Writer, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	_, _ = w.Write(b.Bytes())
}

// StdinPiped reports whether standard input is not a terminal (a pipe, a
// file or the null device): the CLIs read it then.
func StdinPiped() bool {
	fi, err := os.Stdin.Stat()
	if err != nil {
		return false
	}
	if fi.Mode()&os.ModeCharDevice == 0 {
		return true
	}
	null, err := os.Stat(os.DevNull)
	return err == nil && os.SameFile(fi, null)
}

// ReadStdin reads all of standard input when it is piped ("" otherwise).
func ReadStdin() (string, error) {
	if !StdinPiped() {
		return "", nil
	}
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		return "", fmt.Errorf("read stdin: %w", err)
	}
	return string(b), nil
}

var statusRE = regexp.MustCompile(`\b([45]\d\d)\b`)

// HTTPStatus is the first HTTP error status (4xx or 5xx) in text, or 0.
func HTTPStatus(text string) int {
	m := statusRE.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Tokens is an illustrative token count for text (about four bytes a
// token); the stand-ins report it where the CLIs report usage.
func Tokens(text string) int64 { return int64(len(text)+3) / 4 }

// Flags is a minimal command-line parser for the stand-ins: it knows each
// flag's names and whether it takes a value, and keeps the positionals.
type Flags struct {
	// Value and Bool map every accepted spelling ("-p", "--print") to the
	// canonical name.
	Value, Bool map[string]string
	values      map[string][]string
	bools       map[string]bool
	Args        []string
}

// ErrUnknown reports an argument no flag matches.
type ErrUnknown struct{ Arg string }

func (e *ErrUnknown) Error() string { return "unknown argument " + e.Arg }

// ErrNoValue reports a value flag at the end of the arguments.
var ErrNoValue = errors.New("flag needs a value")

// Parse reads args ("--name value", "--name=value", "-n value"; "--"
// ends the flags; "-" is a positional).
func (f *Flags) Parse(args []string) error {
	f.values, f.bools = map[string][]string{}, map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			f.Args = append(f.Args, args[i+1:]...)
			return nil
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			f.Args = append(f.Args, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		if c, ok := f.Bool[name]; ok && !hasVal {
			f.bools[c] = true
			continue
		}
		c, ok := f.Value[name]
		if !ok {
			return &ErrUnknown{Arg: name}
		}
		if !hasVal {
			if i+1 >= len(args) {
				return fmt.Errorf("%s: %w", name, ErrNoValue)
			}
			i++
			val = args[i]
		}
		f.values[c] = append(f.values[c], val)
	}
	return nil
}

// Get is a value flag's last value, or "".
func (f *Flags) Get(name string) string {
	v := f.values[name]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// Has reports whether a flag was given.
func (f *Flags) Has(name string) bool { return f.bools[name] || len(f.values[name]) > 0 }

// UUID is a random version-4 UUID, as the CLIs' session and message ids.
func UUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
