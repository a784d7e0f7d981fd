package gitexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixture is one test case's world: a committed repository, a home
// directory (HOME and XDG_CONFIG_HOME point into it) and the marker file
// anything hostile would create.
type fixture struct {
	repo, home, marker string
}

// evilScript writes an executable shell script at path that creates marker.
func evilScript(t *testing.T, path, marker string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\ntouch '%s'\n", marker)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newFixture makes a repository with one commit, built with Runner itself
// under an empty HOME.
func newFixture(t *testing.T) fixture {
	t.Helper()
	f := fixture{
		repo:   filepath.Join(t.TempDir(), "repo"),
		home:   t.TempDir(),
		marker: filepath.Join(t.TempDir(), "pwned"),
	}
	t.Setenv("HOME", f.home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(f.home, ".config"))
	ctx := context.Background()
	if _, err := (Runner{}).Output(ctx, "-c", "init.defaultBranch=main", "init", "-q", f.repo); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(f.repo, "a.txt"), "a\n")
	g := Runner{Dir: f.repo}
	if _, err := g.Output(ctx, "add", "-A"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Output(ctx, "commit", "-q", "--no-gpg-sign", "-m", "initial"); err != nil {
		t.Fatal(err)
	}
	return f
}

// gitConfig is a config file that, if git read it, would run marker's
// script through an alias, a hook directory and fsmonitor, and hide *.txt.
func gitConfig(t *testing.T, f fixture) string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "evil.sh")
	evilScript(t, script, f.marker)
	hooks := filepath.Join(t.TempDir(), "hooks")
	for _, h := range []string{"pre-commit", "post-commit", "post-checkout", "reference-transaction"} {
		evilScript(t, filepath.Join(hooks, h), f.marker)
	}
	ignore := filepath.Join(t.TempDir(), "ignore")
	writeFile(t, ignore, "*.txt\n")
	return fmt.Sprintf("[alias]\n\tpwn = !%s\n[core]\n\thooksPath = %s\n\tfsmonitor = %s\n\texcludesFile = %s\n[user]\n\tname = Evil\n",
		script, hooks, script, ignore)
}

func TestHardening(t *testing.T) {
	tests := []struct {
		name string
		// setup plants something hostile and returns the runner to use.
		setup func(t *testing.T, f fixture) Runner
		args  []string
		// check inspects the outcome; the marker must not exist in any case.
		check func(t *testing.T, f fixture, out string, err error)
	}{
		{
			name: "host GIT_DIR and GIT_WORK_TREE are dropped",
			setup: func(t *testing.T, f fixture) Runner {
				other := filepath.Join(t.TempDir(), "other")
				if _, err := (Runner{}).Output(context.Background(), "init", "-q", other); err != nil {
					t.Fatal(err)
				}
				t.Setenv("GIT_DIR", filepath.Join(other, ".git"))
				t.Setenv("GIT_WORK_TREE", other)
				t.Setenv("GIT_INDEX_FILE", filepath.Join(other, "index"))
				return Runner{Dir: f.repo}
			},
			args: []string{"rev-parse", "--show-toplevel"},
			check: func(t *testing.T, f fixture, out string, err error) {
				if err != nil {
					t.Fatal(err)
				}
				want, _ := filepath.EvalSymlinks(f.repo)
				if out != want {
					t.Fatalf("toplevel = %q; want %q", out, want)
				}
			},
		},
		{
			name: "host GIT_CONFIG_PARAMETERS is dropped",
			setup: func(t *testing.T, f fixture) Runner {
				script := filepath.Join(t.TempDir(), "evil.sh")
				evilScript(t, script, f.marker)
				t.Setenv("GIT_CONFIG_PARAMETERS", "'alias.pwn'='!"+script+"'")
				return Runner{Dir: f.repo}
			},
			args:  []string{"pwn"},
			check: wantFailure,
		},
		{
			name: "host GIT_CONFIG_COUNT is dropped",
			setup: func(t *testing.T, f fixture) Runner {
				script := filepath.Join(t.TempDir(), "evil.sh")
				evilScript(t, script, f.marker)
				t.Setenv("GIT_CONFIG_COUNT", "1")
				t.Setenv("GIT_CONFIG_KEY_0", "alias.pwn")
				t.Setenv("GIT_CONFIG_VALUE_0", "!"+script)
				return Runner{Dir: f.repo}
			},
			args:  []string{"pwn"},
			check: wantFailure,
		},
		{
			name: "host GIT_EXEC_PATH is dropped",
			setup: func(t *testing.T, f fixture) Runner {
				dir := t.TempDir()
				evilScript(t, filepath.Join(dir, "git-pwn"), f.marker)
				t.Setenv("GIT_EXEC_PATH", dir)
				return Runner{Dir: f.repo}
			},
			args:  []string{"pwn"},
			check: wantFailure,
		},
		{
			name: "global config in HOME is ignored (alias)",
			setup: func(t *testing.T, f fixture) Runner {
				writeFile(t, filepath.Join(f.home, ".gitconfig"), gitConfig(t, f))
				return Runner{Dir: f.repo}
			},
			args:  []string{"pwn"},
			check: wantFailure,
		},
		{
			name: "global config in XDG_CONFIG_HOME is ignored (alias)",
			setup: func(t *testing.T, f fixture) Runner {
				writeFile(t, filepath.Join(f.home, ".config", "git", "config"), gitConfig(t, f))
				return Runner{Dir: f.repo}
			},
			args:  []string{"pwn"},
			check: wantFailure,
		},
		{
			name: "global config is ignored (hooks, fsmonitor, excludes, identity)",
			setup: func(t *testing.T, f fixture) Runner {
				cfg := gitConfig(t, f)
				writeFile(t, filepath.Join(f.home, ".gitconfig"), cfg)
				writeFile(t, filepath.Join(f.home, ".config", "git", "config"), cfg)
				writeFile(t, filepath.Join(f.repo, "b.txt"), "b\n")
				g := Runner{Dir: f.repo}
				if out, err := g.Text(context.Background(), "status", "--porcelain"); err != nil || out != "?? b.txt" {
					t.Fatalf("status = %q, %v; want b.txt untracked", out, err)
				}
				if _, err := g.Output(context.Background(), "add", "-A"); err != nil {
					t.Fatal(err)
				}
				return g
			},
			args: []string{"commit", "-q", "--no-gpg-sign", "-m", "second"},
			check: func(t *testing.T, f fixture, out string, err error) {
				if err != nil {
					t.Fatal(err)
				}
				who, err := (Runner{Dir: f.repo}).Text(context.Background(), "log", "-1", "--format=%an")
				if err != nil || who != "Supervisor" {
					t.Fatalf("author = %q, %v; want Supervisor", who, err)
				}
			},
		},
		{
			name: "repository hooks do not run (commit)",
			setup: func(t *testing.T, f fixture) Runner {
				for _, h := range []string{"pre-commit", "commit-msg", "post-commit", "reference-transaction"} {
					evilScript(t, filepath.Join(f.repo, ".git", "hooks", h), f.marker)
				}
				return Runner{Dir: f.repo}
			},
			args:  []string{"commit", "-q", "--allow-empty", "--no-gpg-sign", "-m", "hooked"},
			check: wantSuccess,
		},
		{
			name: "repository hooks do not run (checkout)",
			setup: func(t *testing.T, f fixture) Runner {
				evilScript(t, filepath.Join(f.repo, ".git", "hooks", "post-checkout"), f.marker)
				return Runner{Dir: f.repo}
			},
			args:  []string{"checkout", "-q", "-b", "topic"},
			check: wantSuccess,
		},
		{
			name: "repository config cannot set hooksPath or fsmonitor",
			setup: func(t *testing.T, f fixture) Runner {
				hooks := filepath.Join(t.TempDir(), "hooks")
				evilScript(t, filepath.Join(hooks, "post-checkout"), f.marker)
				script := filepath.Join(t.TempDir(), "fsmonitor.sh")
				evilScript(t, script, f.marker)
				g := Runner{Dir: f.repo}
				for _, kv := range [][2]string{{"core.hooksPath", hooks}, {"core.fsmonitor", script}} {
					if _, err := g.Output(context.Background(), "config", kv[0], kv[1]); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := g.Output(context.Background(), "status"); err != nil {
					t.Fatal(err)
				}
				return g
			},
			args:  []string{"checkout", "-q", "-b", "topic"},
			check: wantSuccess,
		},
		{
			name:  "the error carries args, exit code and stderr",
			setup: func(t *testing.T, f fixture) Runner { return Runner{Dir: f.repo} },
			args:  []string{"rev-parse", "--verify", "no-such-rev^{commit}"},
			check: func(t *testing.T, f fixture, out string, err error) {
				var gerr *Error
				if !errors.As(err, &gerr) {
					t.Fatalf("err = %v (%T); want *Error", err, err)
				}
				if want := []string{"rev-parse", "--verify", "no-such-rev^{commit}"}; !slices.Equal(gerr.Args, want) {
					t.Fatalf("Args = %q; want %q", gerr.Args, want)
				}
				if gerr.ExitCode != 128 || ExitCode(err) != 128 {
					t.Fatalf("ExitCode = %d, %d; want 128", gerr.ExitCode, ExitCode(err))
				}
				if !strings.Contains(gerr.Stderr, "fatal:") || gerr.Stderr != strings.TrimSpace(gerr.Stderr) {
					t.Fatalf("Stderr = %q; want git's trimmed fatal message", gerr.Stderr)
				}
				msg := err.Error()
				for _, want := range []string{"git rev-parse --verify no-such-rev^{commit}: ", "exit status 128", gerr.Stderr} {
					if !strings.Contains(msg, want) {
						t.Fatalf("Error() = %q; want it to contain %q", msg, want)
					}
				}
				if strings.Contains(msg, "hooksPath") {
					t.Fatalf("Error() = %q quotes the hardening flags", msg)
				}
			},
		},
		{
			name: "Env may not set configuration",
			setup: func(t *testing.T, f fixture) Runner {
				script := filepath.Join(t.TempDir(), "evil.sh")
				evilScript(t, script, f.marker)
				return Runner{Dir: f.repo, Env: []string{"GIT_CONFIG_PARAMETERS='alias.pwn'='!" + script + "'"}}
			},
			args: []string{"pwn"},
			check: func(t *testing.T, f fixture, out string, err error) {
				if err == nil || !strings.Contains(err.Error(), "GIT_CONFIG_PARAMETERS may not be set") {
					t.Fatalf("err = %v; want Env refused", err)
				}
			},
		},
		{
			name: "Env locates the index and explicit git dir and work tree win",
			setup: func(t *testing.T, f fixture) Runner {
				t.Setenv("GIT_INDEX_FILE", filepath.Join(t.TempDir(), "hostile-index"))
				writeFile(t, filepath.Join(f.repo, "c.txt"), "c\n")
				return Runner{
					Dir: t.TempDir(), GitDir: filepath.Join(f.repo, ".git"), WorkTree: f.repo,
					Env: []string{"GIT_INDEX_FILE=" + filepath.Join(t.TempDir(), "index")},
				}
			},
			args: []string{"ls-files", "--cached", "--others"},
			check: func(t *testing.T, f fixture, out string, err error) {
				// The fresh index is empty: every file is listed once, as
				// untracked.
				if err != nil || out != "a.txt\nc.txt" {
					t.Fatalf("ls-files = %q, %v", out, err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			g := tt.setup(t, f)
			out, err := g.Text(context.Background(), tt.args...)
			tt.check(t, f, out, err)
			if _, err := os.Stat(f.marker); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a hostile program ran (marker %s: %v)", f.marker, err)
			}
		})
	}
}

func wantSuccess(t *testing.T, f fixture, out string, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantFailure expects `git pwn` to fail as an unknown command.
func wantFailure(t *testing.T, f fixture, out string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("git pwn succeeded (%q); want an unknown command", out)
	}
	if !strings.Contains(err.Error(), "not a git command") {
		t.Fatalf("err = %v; want an unknown command", err)
	}
}

func TestOutputStdin(t *testing.T) {
	out, err := (Runner{}).OutputStdin(context.Background(), strings.NewReader("hello\n"), "hash-object", "--stdin")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), "ce013625030ba8dba906f756967f9e9ca394464a"; got != want {
		t.Fatalf("hash-object = %s; want %s", got, want)
	}
}

func TestMaxOutput(t *testing.T) {
	f := newFixture(t)
	big := strings.Repeat("0123456789abcdef\n", 1<<14) // 272 KiB
	writeFile(t, filepath.Join(f.repo, "big.txt"), big)
	g := Runner{Dir: f.repo}
	blob, err := g.Text(context.Background(), "hash-object", "-w", "big.txt")
	if err != nil {
		t.Fatal(err)
	}
	g.MaxOutput = 1 << 10
	_, err = g.Output(context.Background(), "cat-file", "blob", blob)
	if !errors.Is(err, ErrOutputLimit) || ExitCode(err) != -1 {
		t.Fatalf("err = %v (exit %d); want ErrOutputLimit", err, ExitCode(err))
	}
	g.MaxOutput = len(big)
	if out, err := g.Output(context.Background(), "cat-file", "blob", blob); err != nil || string(out) != big {
		t.Fatalf("cat-file at the limit: %d bytes, %v", len(out), err)
	}
}

func TestContextCanceled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// hash-object --stdin waits for standard input that never ends.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	start := time.Now()
	_, err = (Runner{}).OutputStdin(ctx, r, "hash-object", "--stdin")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v; want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v after the deadline", d)
	}
}

// TestLimitedBuffer checks the limits hold through io.Copy, which exec
// uses and which would bypass Write through a promoted ReadFrom.
func TestLimitedBuffer(t *testing.T) {
	src := strings.Repeat("x", 100) + "\n"
	tests := []struct {
		name     string
		max      int
		discard  bool
		wantErr  bool
		wantText string
	}{
		{"no limit", 0, false, false, strings.TrimSpace(src)},
		{"at the limit", len(src), false, false, strings.TrimSpace(src)},
		{"over the limit fails", 10, false, true, ""},
		{"over the limit discards", 10, true, false, "xxxxxxxxxx …(truncated)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &limitedBuffer{max: tt.max, discard: tt.discard}
			_, err := io.Copy(b, strings.NewReader(src))
			if (err != nil) != tt.wantErr {
				t.Fatalf("io.Copy err = %v; want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				if !b.overflow {
					t.Fatal("overflow not set")
				}
				return
			}
			if got := b.text(); got != tt.wantText {
				t.Fatalf("text = %q; want %q", got, tt.wantText)
			}
		})
	}
}
