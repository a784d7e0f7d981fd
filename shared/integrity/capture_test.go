package integrity

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestCheckGitFails covers WI-15: git status failing after the gate is a
// violation (fail safe), and the recorded paths are still compared.
func TestCheckGitFails(t *testing.T) {
	fake := t.TempDir()
	testkit.WriteFile(t, filepath.Join(fake, "git"), "#!/bin/sh\necho 'fatal: broken on purpose' >&2\nexit 128\n")
	must(t, os.Chmod(filepath.Join(fake, "git"), 0o755))
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	slow := t.TempDir()
	testkit.WriteFile(t, filepath.Join(slow, "git"), "#!/bin/sh\nexec "+sleep+" 30\n")
	must(t, os.Chmod(filepath.Join(slow, "git"), 0o755))

	tests := []struct {
		name   string
		path   string // PATH at check time
		opts   Options
		detail string
	}{
		{"git missing", t.TempDir(), Options{}, "not found"},
		{"git exits 128", fake, Options{}, "broken on purpose"},
		{"git hangs past the timeout", slow, Options{GitTimeout: 300 * time.Millisecond}, "deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newWorktree(t)
			b := capture(t, f, tt.opts)
			testkit.WriteFile(t, f.path("src/a.go"), "package changed\n")
			t.Setenv("PATH", tt.path)
			r := check(t, b)
			want := []Violation{
				{Path: "src/a.go", Kind: KindModified},
				{Path: UnknownGitStatusFailed, Kind: KindUnknown, Detail: tt.detail},
			}
			assertReport(t, r, want, nil)
		})
	}
}

// TestCaptureErrors: no baseline when the directory is not a work tree
// (GI-05) or git fails at capture (WI-07).
func TestCaptureErrors(t *testing.T) {
	ctx := testkit.Context(t, time.Minute)
	if _, err := Capture(ctx, t.TempDir(), Options{}); !errors.Is(err, errNotRepo) {
		t.Errorf("Capture(not a repo) = %v, want errNotRepo", err)
	}
	if _, err := Capture(ctx, filepath.Join(t.TempDir(), "missing"), Options{}); err == nil {
		t.Error("Capture(missing dir): want an error")
	}
	f := newRepo(t)
	if _, err := Capture(ctx, f.dir, Options{Git: filepath.Join(t.TempDir(), "no-git")}); err == nil {
		t.Error("Capture with a missing git binary: want an error")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Capture(cancelled, f.dir, Options{}); err == nil {
		t.Error("Capture with a cancelled context: want an error")
	}
	b := capture(t, f, Options{})
	if _, err := b.Check(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Check with a cancelled context = %v, want context.Canceled", err)
	}
	var nilBase *Baseline
	if _, err := nilBase.Check(ctx); err == nil {
		t.Error("Check on a nil baseline: want an error")
	}
}

// TestUnsafeGitPointer covers GI-04 at capture: a .git that points outside
// the expected locations gives a baseline whose every check is a violation.
func TestUnsafeGitPointer(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		opts  func(f fixture) Options
		want  string // substring of Baseline.unsafe
	}{
		{
			name: "points at an unrelated repository",
			setup: func(t *testing.T, dir string) {
				other := t.TempDir()
				runGit(t, other, "init", "-q")
				testkit.WriteFile(t, filepath.Join(dir, ".git"), "gitdir: "+filepath.Join(other, ".git")+"\n")
			},
			want: "not a worktree git directory",
		},
		{
			name: "points at another worktree's git directory",
			setup: func(t *testing.T, dir string) {
				other := newWorktree(t)
				testkit.WriteFile(t, filepath.Join(dir, ".git"), "gitdir: "+other.gitDir+"\n")
			},
			want: "registered for",
		},
		{
			name: "points nowhere",
			setup: func(t *testing.T, dir string) {
				testkit.WriteFile(t, filepath.Join(dir, ".git"), "gitdir: /nonexistent/x\n")
			},
			want: "cannot be resolved",
		},
		{
			name: "unexpected format",
			setup: func(t *testing.T, dir string) {
				testkit.WriteFile(t, filepath.Join(dir, ".git"), "ref: refs/heads/main\n")
			},
			want: "unexpected format",
		},
		{
			name: "symbolic link",
			setup: func(t *testing.T, dir string) {
				other := t.TempDir()
				runGit(t, other, "init", "-q")
				os.Remove(filepath.Join(dir, ".git"))
				must(t, os.Symlink(filepath.Join(other, ".git"), filepath.Join(dir, ".git")))
			},
			want: "symbolic link",
		},
		{
			name: "not the expected git directory",
			opts: func(f fixture) Options { return Options{GitDir: filepath.Join(f.commonDir, "worktrees", "elsewhere")} },
			want: "expected git directory",
		},
		{
			name: "another existing directory than expected",
			opts: func(f fixture) Options { return Options{GitDir: f.commonDir} },
			want: "expected " + "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newWorktree(t)
			if tt.setup != nil {
				tt.setup(t, f.dir)
			}
			var opts Options
			if tt.opts != nil {
				opts = tt.opts(f)
			}
			b, err := Capture(testkit.Context(t, time.Minute), f.dir, opts)
			if err != nil {
				t.Fatalf("Capture: %v", err)
			}
			if !strings.Contains(b.unsafe, tt.want) || b.unsafe == "" {
				t.Fatalf("unsafe = %q, want it to contain %q", b.unsafe, tt.want)
			}
			r := check(t, b)
			assertReport(t, r, []Violation{{Path: ".git", Kind: KindGit, Detail: "unsafe"}}, nil)
		})
	}
}

// TestExpectedGitDir: with Options.GitDir naming the worktree's git
// directory, the worktree is accepted (GI-04).
func TestExpectedGitDir(t *testing.T) {
	f := newWorktree(t)
	b := capture(t, f, Options{GitDir: f.gitDir})
	testkit.WriteFile(t, f.path("x"), "x")
	assertReport(t, check(t, b), []Violation{{Path: "x", Kind: KindNew}}, nil)

	// A .git file naming a git directory inside the work tree is accepted.
	r := newRepo(t)
	must(t, os.Rename(filepath.Join(r.dir, ".git"), filepath.Join(r.dir, ".realgit")))
	testkit.WriteFile(t, filepath.Join(r.dir, ".git"), "gitdir: .realgit\n")
	testkit.WriteFile(t, filepath.Join(r.dir, ".realgit", "info", "exclude"), ".realgit/\n")
	b = capture(t, r, Options{})
	assertReport(t, check(t, b), nil, nil)
}

// TestOwnGitDoesNotWrite: capturing and checking never write .git, even
// when the index's stat data is stale and a plain `git status` would
// refresh it.
func TestOwnGitDoesNotWrite(t *testing.T) {
	for _, layout := range layouts {
		t.Run(layout.name, func(t *testing.T) {
			f := layout.make(t)
			// Stale stat data for every tracked file: same content, new mtime.
			later := time.Now().Add(2 * time.Second)
			for rel := range initialFiles {
				must(t, os.Chtimes(f.path(rel), later, later))
			}
			index := filepath.Join(f.gitDir, "index")
			before, _ := os.Stat(index)
			b := capture(t, f, Options{})
			assertReport(t, check(t, b), nil, nil)
			assertReport(t, check(t, b), nil, nil)
			after, _ := os.Stat(index)
			if !before.ModTime().Equal(after.ModTime()) || before.Size() != after.Size() {
				t.Errorf("index written by the integrity scans")
			}
		})
	}
}

// TestHashLimits covers WI-10 and its documented limitation: files
// without a recorded hash (large untracked files, anything past the hash
// budget) are compared by size and mtime only.
func TestHashLimits(t *testing.T) {
	t.Run("large untracked file is compared by size and mtime", func(t *testing.T) {
		f := newRepo(t)
		big := strings.Repeat("u", 200<<10)
		testkit.WriteFile(t, f.path("untracked.bin"), big)
		b := capture(t, f, Options{})
		if st := recorded(t, b, "untracked.bin"); st.hash != "" {
			t.Fatalf("untracked file above the threshold was hashed")
		}
		p := f.path("untracked.bin")
		keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(big)) })
		assertReport(t, check(t, b), nil, nil) // the limitation
		testkit.WriteFile(t, p, big+"more")
		assertReport(t, check(t, b), []Violation{{Path: "untracked.bin", Kind: KindModified}}, nil)
	})
	t.Run("small untracked file is hashed", func(t *testing.T) {
		f := newRepo(t)
		testkit.WriteFile(t, f.path("untracked.txt"), "small")
		b := capture(t, f, Options{})
		p := f.path("untracked.txt")
		keepMtime(t, p, func() { testkit.WriteFile(t, p, "SMALL") })
		assertReport(t, check(t, b), []Violation{{Path: "untracked.txt", Kind: KindModified, Detail: "size and mtime unchanged"}}, nil)
	})
	t.Run("tracked file above MaxHashSize", func(t *testing.T) {
		f := newRepo(t)
		b := capture(t, f, Options{MaxHashSize: 1000, HashThreshold: 10})
		if st := recorded(t, b, "big.dat"); st.hash != "" {
			t.Fatal("big.dat hashed despite MaxHashSize")
		}
		if st := recorded(t, b, "src/a.go"); st.hash == "" {
			t.Fatal("src/a.go not hashed although tracked and below MaxHashSize")
		}
		p := f.path("big.dat")
		keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(initialFiles["big.dat"])) })
		assertReport(t, check(t, b), nil, nil)
		later := time.Now().Add(time.Hour)
		must(t, os.Chtimes(p, later, later))
		assertReport(t, check(t, b), []Violation{{Path: "big.dat", Kind: KindModified}}, nil)
	})
	t.Run("budget spent", func(t *testing.T) {
		f := newRepo(t)
		b := capture(t, f, Options{MaxHashBytes: 100})
		st := b.Stats()
		if st.HashedBytes > 100 || st.Unhashed == 0 || st.Hashed+st.Unhashed != 9 {
			t.Fatalf("stats %+v: want at most 100 bytes hashed and the rest unhashed", st)
		}
		testkit.WriteFile(t, f.path("src/a.go"), "package changed\n")
		assertReport(t, check(t, b), []Violation{{Path: "src/a.go", Kind: KindModified}}, nil)
	})
}

// TestActiveSkips covers WI-05's three override rules.
func TestActiveSkips(t *testing.T) {
	tests := []struct {
		allowed    []string
		overridden []string
	}{
		{nil, nil},
		{[]string{"coverage.out", "htmlcov/**"}, nil},
		{[]string{"build/**"}, []string{"build/"}}, // (a) starts with the candidate
		{[]string{"./dist"}, []string{"dist/"}},    // (a) equals it without "/"
		{[]string{"target/"}, []string{"target/"}}, // (a)
		{[]string{"*/test"}, []string{"node_modules/", ".venv/", "venv/", "__pycache__/", "build/", "dist/", "vendor/", "target/", ".next/"}}, // (b)
		{[]string{"vendor/*"}, []string{"vendor/"}},               // (a)
		{[]string{"**/__pycache__/**"}, []string{"__pycache__/"}}, // (c)
		{[]string{"**/.venv/**"}, []string{".venv/", "venv/"}},    // (c) contains "venv" too
		{[]string{"pkg/build/out"}, nil},                          // nested: stays skipped
	}
	for _, tt := range tests {
		skips := activeSkips(tt.allowed)
		var overridden []string
		for _, c := range SkipCandidates {
			if !slices.Contains(skips, c) {
				overridden = append(overridden, c)
			}
		}
		if !slices.Equal(overridden, tt.overridden) {
			t.Errorf("activeSkips(%q) overrides %q, want %q", tt.allowed, overridden, tt.overridden)
		}
	}
	all := activeSkips(nil)
	for path, want := range map[string]bool{
		"node_modules/x.js":  true,
		"a/b/node_modules/x": true,
		"my_node_modules/x":  false,
		"build/":             true,
		"build":              false,
		".supervisor/build/": false, // protected paths are never skipped
		"src/venv/x":         true,
		"src/.venv/x":        true,
	} {
		if got := skipped(path, all); got != want {
			t.Errorf("skipped(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestIsProtected(t *testing.T) {
	for path, want := range map[string]bool{
		".git": true, ".git/config": true, "a/.git/x": true, ".supervisor/": true,
		"x/.supervisor/y": true, ".gitignore": false, "a.git": false, ".supervisor2/x": false,
	} {
		if got := isProtected(path); got != want {
			t.Errorf("isProtected(%q) = %v, want %v", path, got, want)
		}
		if want && compileAllowed([]string{"**", path, ".git/**"}).match(path) {
			t.Errorf("allowed_writes matched protected %q", path)
		}
	}
}

func TestSummary(t *testing.T) {
	r := &Report{Violations: []Violation{
		{Path: ".git/config", Kind: KindGit, Detail: "changed"},
		{Path: "x.txt", Kind: KindNew},
		{Path: "src/a.go", Kind: KindModified},
		{Path: "gone", Kind: KindDeleted},
		{Path: "nl\nname", Kind: KindNew, Detail: "resolves outside the workspace"},
		{Path: UnknownGitStatusFailed, Kind: KindUnknown},
	}}
	r.sort()
	want := `integrity violation: modified src/a.go; new "nl\nname" (resolves outside the workspace); new x.txt; deleted gone; .git/config changed; <unknown - git status failed>`
	if got := r.Summary(); got != want {
		t.Errorf("Summary:\n got  %s\n want %s", got, want)
	}
	if r.Clean() {
		t.Error("Clean() with violations")
	}
	if got := r.Strings(); len(got) != 6 || got[0] != "modified src/a.go" {
		t.Errorf("Strings() = %q", got)
	}
	clean := &Report{Ignored: []string{"build/"}}
	if got := clean.Summary(); got != "integrity: clean [ignored paths written, not violations: build/]" || !clean.Clean() {
		t.Errorf("clean Summary = %q", got)
	}
	many := &Report{}
	for i := range 25 {
		many.Violations = append(many.Violations, Violation{Path: fmt.Sprintf("f%02d", i), Kind: KindNew})
	}
	if got := many.Summary(); !strings.HasSuffix(got, "new f19; … and 5 more") {
		t.Errorf("long Summary = %q", got)
	}
}

// BenchmarkCaptureCheck measures a capture and a check of a work tree with
// 2000 tracked files, the capture examining every file ("stat") or taking
// their stat data from the freshly written index ("index-fresh",
// Options.IndexFresh, PERF-53); stat-calls/op is the capture's.
func BenchmarkCaptureCheck(b *testing.B) {
	dir := b.TempDir()
	runGit(b, dir, "init", "-q")
	for i := range 2000 {
		testkit.WriteFile(b, filepath.Join(dir, fmt.Sprintf("pkg%02d", i%40), fmt.Sprintf("file%04d.go", i)), strings.Repeat("x", 2000))
	}
	runGit(b, dir, "add", "-A")
	runGit(b, dir, "commit", "-q", "-m", "bench")
	settled()
	runGit(b, dir, "update-index", "-q", "--refresh", "--force-write-index")
	settled()
	ctx := context.Background()
	for _, fresh := range []bool{false, true} {
		name := "stat"
		if fresh {
			name = "index-fresh"
		}
		b.Run(name, func(b *testing.B) {
			calls := 0
			for b.Loop() {
				base, err := Capture(ctx, dir, Options{IndexFresh: fresh})
				if err != nil {
					b.Fatal(err)
				}
				calls = base.Stats().StatCalls
				r, err := base.Check(ctx)
				if err != nil || !r.Clean() {
					b.Fatalf("check: %v %v", r.Summary(), err)
				}
			}
			b.ReportMetric(float64(calls), "stat-calls/op")
		})
	}
}
