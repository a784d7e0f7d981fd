package integrity

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

type scenario struct {
	name string
	// only restricts the scenario to one layout ("repo" or "worktree").
	only string
	opts Options
	// before runs before the capture (the agent's own changes).
	before func(t *testing.T, f fixture)
	// gate runs between capture and check.
	gate func(t *testing.T, f fixture)
	// want lists the expected violations, in report order; a Detail in
	// want must be a substring of the reported one.
	want        []Violation
	wantIgnored []string
}

func scenarios() []scenario {
	return []scenario{
		{
			name: "clean",
		},
		{
			// WI-18: a clean tracked file (absent from git
			// status at capture) is modified.
			name: "WI-18 modify tracked file",
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("src/a.go"), "package a\n\nfunc A() int { return 42 }\n")
			},
			want: []Violation{{Path: "src/a.go", Kind: KindModified}},
		},
		{
			name: "WI-18 new untracked file",
			gate: func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("x.txt"), "x\n") },
			want: []Violation{{Path: "x.txt", Kind: KindNew}},
		},
		{
			name: "WI-19 delete tracked file",
			gate: func(t *testing.T, f fixture) { os.Remove(f.path("README.md")) },
			want: []Violation{{Path: "README.md", Kind: KindDeleted}},
		},
		{
			name: "WI-20 racy rewrite with same size and mtime",
			gate: func(t *testing.T, f fixture) {
				p := f.path("src/a.go")
				keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(initialFiles["src/a.go"])) })
			},
			want: []Violation{{Path: "src/a.go", Kind: KindModified, Detail: "size and mtime unchanged"}},
		},
		{
			// WI-10: a tracked file above the 100 KiB threshold is hashed
			// (streaming) all the same.
			name: "WI-10 racy rewrite of a large tracked file",
			gate: func(t *testing.T, f fixture) {
				p := f.path("big.dat")
				keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(initialFiles["big.dat"])) })
			},
			want: []Violation{{Path: "big.dat", Kind: KindModified, Detail: "size and mtime unchanged"}},
		},
		{
			name: "rewrite with identical content is not a change",
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("src/a.go"), initialFiles["src/a.go"])
				later := time.Now().Add(time.Hour)
				must(t, os.Chtimes(f.path("src/b.go"), later, later))
			},
		},
		{
			name: "mode change",
			gate: func(t *testing.T, f fixture) { must(t, os.Chmod(f.path("src/b.go"), 0o755)) },
			want: []Violation{{Path: "src/b.go", Kind: KindModified, Detail: "mode"}},
		},
		{
			name: "gate renames a tracked file",
			gate: func(t *testing.T, f fixture) { must(t, os.Rename(f.path("README.md"), f.path("README.txt"))) },
			want: []Violation{{Path: "README.txt", Kind: KindNew}, {Path: "README.md", Kind: KindDeleted}},
		},
		{
			name: "allowed writes",
			opts: Options{AllowedWrites: []string{"coverage.out", "htmlcov/**"}},
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("coverage.out"), "new coverage\n")
				testkit.WriteFile(t, f.path("htmlcov/index.html"), "<html>\n")
				testkit.WriteFile(t, f.path("htmlcov/sub/style.css"), "p{}\n")
			},
		},
		{
			name: "WI-22 allowed deletion",
			opts: Options{AllowedWrites: []string{"coverage.out"}},
			gate: func(t *testing.T, f fixture) { os.Remove(f.path("coverage.out")) },
		},
		{
			name: "writes outside allowed writes",
			opts: Options{AllowedWrites: []string{"coverage.out", "htmlcov/**"}},
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("htmlcov/index.html"), "<html>\n")
				testkit.WriteFile(t, f.path("coverage.xml"), "<xml/>\n")
				testkit.WriteFile(t, f.path("src/a.go"), "package a\n")
			},
			want: []Violation{{Path: "src/a.go", Kind: KindModified}, {Path: "coverage.xml", Kind: KindNew}},
		},
		{
			name: "GI-01 touch .git/config in the common dir",
			gate: func(t *testing.T, f fixture) {
				later := time.Now().Add(time.Hour)
				if err := os.Chtimes(filepath.Join(f.commonDir, "config"), later, later); err != nil {
					t.Fatal(err)
				}
			},
			// config decides what git runs: git is not run again.
			want: []Violation{{Path: ".git/config", Kind: KindGit, Detail: "changed"}, {Path: UnknownNotRescanned, Kind: KindUnknown}},
		},
		{
			name: "GI-01 HEAD in the per-worktree git dir rewritten",
			gate: func(t *testing.T, f fixture) {
				head := runGit(t, f.dir, "rev-parse", "HEAD")
				if err := os.WriteFile(filepath.Join(f.gitDir, "HEAD"), []byte(head+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: []Violation{{Path: ".git/HEAD", Kind: KindGit}},
		},
		{
			name: "GI-02 hook added",
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, filepath.Join(f.commonDir, "hooks", "pre-commit"), "#!/bin/sh\n")
			},
			want: []Violation{{Path: ".git/hooks/pre-commit", Kind: KindGit, Detail: "created"}},
		},
		{
			name: "GI-02 ref moved",
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, filepath.Join(f.commonDir, "refs", "heads", "evil"), strings.Repeat("0", 40)+"\n")
			},
			want: []Violation{{Path: ".git/refs/heads/evil", Kind: KindGit, Detail: "created"}},
		},
		{
			name: "index changed by git add",
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("x.txt"), "x\n")
				runGit(t, f.dir, "add", "x.txt")
			},
			want: []Violation{{Path: "x.txt", Kind: KindNew}, {Path: ".git/index", Kind: KindGit}},
		},
		{
			// PP-01…PP-03: no pattern opens .git or .supervisor, not even **.
			name: "allowed writes cannot allow .git or .supervisor",
			opts: Options{AllowedWrites: []string{"**", ".git/**", ".supervisor/**", "**/.supervisor/**"}},
			gate: func(t *testing.T, f fixture) {
				head := runGit(t, f.dir, "rev-parse", "HEAD")
				must(t, os.WriteFile(filepath.Join(f.gitDir, "HEAD"), []byte(head+"\n"), 0o644))
				testkit.WriteFile(t, f.path(".supervisor/lock"), "1\n")
				testkit.WriteFile(t, f.path("anything.txt"), "allowed by **\n")
			},
			want: []Violation{{Path: ".supervisor/lock", Kind: KindNew}, {Path: ".git/HEAD", Kind: KindGit}},
		},
		{
			// .supervisor/ is walked in full, even where .gitignore hides it.
			name: "ignored .supervisor content is still protected",
			opts: Options{AllowedWrites: []string{"**"}},
			before: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path(".supervisor/cache/entry"), "cached\n")
			},
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path(".supervisor/cache/entry"), "poisoned\n")
				testkit.WriteFile(t, f.path(".supervisor/cache/other"), "x\n")
			},
			want: []Violation{{Path: ".supervisor/cache/entry", Kind: KindModified}, {Path: ".supervisor/cache/other", Kind: KindNew}},
		},
		{
			// An ignored directory is one "build/" entry, reported as
			// ignored and never taken for new files.
			name: "ignored directory created",
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("build/out.o"), "obj\n")
				testkit.WriteFile(t, f.path("build/sub/more.o"), "obj\n")
				testkit.WriteFile(t, f.path("test.log"), "log\n")
			},
			wantIgnored: []string{"build/", "test.log"},
		},
		{
			name: "pre-existing ignored directory changed",
			before: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("build/out.o"), "obj\n")
				testkit.WriteFile(t, f.path("app.log"), "log\n")
			},
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("build/new.o"), "obj\n")
				testkit.WriteFile(t, f.path("app.log"), "log, longer\n")
			},
			wantIgnored: []string{"app.log", "build/"},
		},
		{
			name: "ignored paths matching allowed writes are not reported",
			opts: Options{AllowedWrites: []string{"build/**", "*.log"}},
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("build/out.o"), "obj\n")
				testkit.WriteFile(t, f.path("test.log"), "log\n")
			},
		},
		{
			name: "WI-22 symlink to outside created",
			gate: func(t *testing.T, f fixture) {
				if err := os.Symlink(t.TempDir(), f.path("escape")); err != nil {
					t.Fatal(err)
				}
			},
			want: []Violation{{Path: "escape", Kind: KindNew, Detail: "resolves outside the workspace"}},
		},
		{
			name: "WI-22 symlink to outside inside allowed writes",
			opts: Options{AllowedWrites: []string{"out/**", "out", "htmlcov/**"}},
			gate: func(t *testing.T, f fixture) {
				must(t, os.Symlink("/etc/passwd", f.path("out")))
				must(t, os.MkdirAll(f.path("htmlcov"), 0o755))
				must(t, os.Symlink("../../../../../../../../../../etc", f.path("htmlcov/etc")))
				must(t, os.Symlink("does-not-exist", f.path("htmlcov/dangling")))
				must(t, os.Symlink("../src/a.go", f.path("htmlcov/inside"))) // resolves inside: allowed
			},
			want: []Violation{
				{Path: "htmlcov/dangling", Kind: KindNew, Detail: "cannot be resolved"},
				{Path: "htmlcov/etc", Kind: KindNew, Detail: "resolves outside"},
				{Path: "out", Kind: KindNew, Detail: "resolves outside"},
			},
		},
		{
			name: "nested git repository inside allowed writes",
			opts: Options{AllowedWrites: []string{"htmlcov/**"}},
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("htmlcov/index.html"), "<html>\n")
				runGit(t, f.path("htmlcov"), "init", "-q")
			},
			want: []Violation{{Path: "htmlcov/", Kind: KindNew, Detail: "nested git repository"}},
		},
		{
			name: "tracked directory replaced by a symlink",
			gate: func(t *testing.T, f fixture) {
				must(t, os.Rename(f.path("docs"), f.path("docs2")))
				must(t, os.Symlink("docs2", f.path("docs")))
			},
			want: []Violation{
				{Path: "docs/guide.txt", Kind: KindModified, Detail: "symbolic link"},
				{Path: "docs", Kind: KindNew},
				{Path: "docs2/guide.txt", Kind: KindNew},
			},
		},
		{
			name: "tracked file replaced by a symlink to outside",
			gate: func(t *testing.T, f fixture) {
				os.Remove(f.path("src/b.go"))
				must(t, os.Symlink("/etc/hostname", f.path("src/b.go")))
			},
			want: []Violation{{Path: "src/b.go", Kind: KindModified, Detail: "outside"}},
		},
		{
			// WI-01, WI-04: untracked files in a skip candidate go unnoticed.
			name: "WI-01 untracked file in a skip candidate",
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("node_modules/x.js"), "x\n")
				testkit.WriteFile(t, f.path("pkg/__pycache__/m.pyc"), "x\n")
			},
		},
		{
			name: "WI-02 tracked file in a skip candidate",
			gate: func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("vendor/lib.go"), "package evil\n") },
			want: []Violation{{Path: "vendor/lib.go", Kind: KindModified}},
		},
		{
			name: "WI-05 allowed writes turn skipping off",
			opts: Options{AllowedWrites: []string{"node_modules/.cache/**"}},
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("node_modules/.cache/x"), "ok\n")
				testkit.WriteFile(t, f.path("node_modules/x.js"), "not ok\n")
				testkit.WriteFile(t, f.path("venv/y.py"), "still skipped\n")
			},
			want: []Violation{{Path: "node_modules/x.js", Kind: KindNew}},
		},
		{
			// The agent's own uncommitted work (unstaged, staged, deleted,
			// untracked, a staged rename) is the baseline, not a change.
			name: "WI-11 dirty work tree before the gate",
			before: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("src/a.go"), "package a // edited\n")
				testkit.WriteFile(t, f.path("src/new.go"), "package a\n")
				runGit(t, f.dir, "add", "src/new.go")
				os.Remove(f.path("README.md"))
				testkit.WriteFile(t, f.path("untracked.txt"), "u\n")
				runGit(t, f.dir, "mv", "docs/guide.txt", "docs/manual.txt")
				testkit.WriteFile(t, f.path("node_modules/dep.js"), "dep\n")
			},
		},
		{
			name: "WI-11 changes after a staged rename",
			before: func(t *testing.T, f fixture) {
				runGit(t, f.dir, "mv", "docs/guide.txt", "docs/manual.txt")
				testkit.WriteFile(t, f.path("untracked.txt"), "u\n")
			},
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("docs/manual.txt"), "changed\n")
				testkit.WriteFile(t, f.path("docs/guide.txt"), "back again\n")
				os.Remove(f.path("untracked.txt"))
			},
			want: []Violation{
				{Path: "docs/manual.txt", Kind: KindModified},
				{Path: "docs/guide.txt", Kind: KindNew},
				{Path: "untracked.txt", Kind: KindDeleted},
			},
		},
		{
			// WI-11, WI-13: names with spaces, a newline and unicode, in a
			// staged rename (R entry: two NUL-separated fields).
			name: "WI-11 weird names in a staged rename",
			before: func(t *testing.T, f fixture) {
				runGit(t, f.dir, "mv", weirdName, "dir with space/renamed\n✓ 2.txt")
			},
			gate: func(t *testing.T, f fixture) {
				testkit.WriteFile(t, f.path("dir with space/renamed\n✓ 2.txt"), "weird, changed\n")
				testkit.WriteFile(t, f.path("new\nfile ☃ .txt"), "x\n")
			},
			want: []Violation{
				{Path: "dir with space/renamed\n✓ 2.txt", Kind: KindModified},
				{Path: "new\nfile ☃ .txt", Kind: KindNew},
			},
		},
		{
			name: "weird tracked name modified",
			gate: func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path(weirdName), "changed\n") },
			want: []Violation{{Path: weirdName, Kind: KindModified}},
		},
		{
			// GI-04: a gate pointing .git elsewhere is unsafe, and git is
			// not run against the new target.
			name: "GI-04 .git file rewritten to point elsewhere",
			only: "worktree",
			gate: func(t *testing.T, f fixture) {
				other := t.TempDir()
				runGit(t, other, "init", "-q")
				testkit.WriteFile(t, f.path(".git"), "gitdir: "+filepath.Join(other, ".git")+"\n")
			},
			want: []Violation{{Path: ".git", Kind: KindGit, Detail: "unsafe"}, {Path: UnknownNotRescanned, Kind: KindUnknown}},
		},
		{
			name: "GI-04 .git file replaced by a directory",
			only: "worktree",
			gate: func(t *testing.T, f fixture) {
				os.Remove(f.path(".git"))
				runGit(t, f.dir, "init", "-q")
			},
			want: []Violation{{Path: ".git", Kind: KindGit, Detail: "changed"}, {Path: UnknownNotRescanned, Kind: KindUnknown}},
		},
		{
			name: "GI-05 .git file removed",
			only: "worktree",
			gate: func(t *testing.T, f fixture) { os.Remove(f.path(".git")) },
			want: []Violation{{Path: ".git", Kind: KindGit, Detail: "removed"}, {Path: UnknownNotRescanned, Kind: KindUnknown}},
		},
		{
			name: "GI-05 .git directory removed",
			only: "repo",
			gate: func(t *testing.T, f fixture) { os.RemoveAll(f.path(".git")) },
			want: []Violation{
				{Path: ".git", Kind: KindGit, Detail: "removed"},
				{Path: UnknownNotRescanned, Kind: KindUnknown},
				{Path: UnknownGitState, Kind: KindUnknown},
			},
		},
		{
			// The workspace Manager pins commits in the shared mirror for
			// other jobs while a gate runs: not a violation.
			name: "shared mirror updated by the host",
			only: "worktree",
			gate: func(t *testing.T, f fixture) {
				head := runGit(t, f.dir, "rev-parse", "HEAD")
				runGit(t, f.commonDir, "--git-dir="+f.commonDir, "update-ref", "refs/supervisor/base/"+head, head)
				// A new pack, as a bundle fetch writes.
				src := filepath.Join(filepath.Dir(f.commonDir), "src")
				testkit.WriteFile(t, filepath.Join(src, "more.txt"), "more\n")
				runGit(t, src, "add", "more.txt")
				runGit(t, src, "commit", "-q", "-m", "more")
				runGit(t, f.commonDir, "--git-dir="+f.commonDir, "-c", "fetch.unpackLimit=1", "fetch", "-q",
					"--no-write-fetch-head", src, "+refs/heads/*:refs/supervisor/bundles/x/*")
			},
		},
	}
}

// TestCheck runs every scenario in both layouts, with and without
// Options.IndexFresh. With it, the fixture's files are let age past the
// racy margin first, so that the capture takes the tracked files' stat
// data from the index rather than examining them (PERF-53); a scenario
// whose agent changes tracked files before the capture breaks that
// promise only where the fast capture does not apply (untracked paths),
// or changes the same files again in the gate.
func TestCheck(t *testing.T) {
	for _, layout := range layouts {
		for _, fresh := range []bool{false, true} {
			mode := ""
			if fresh {
				mode = "/index-fresh"
			}
			for _, sc := range scenarios() {
				if sc.only != "" && sc.only != layout.name {
					continue
				}
				t.Run(layout.name+mode+"/"+sc.name, func(t *testing.T) {
					t.Parallel()
					f := layout.make(t)
					if sc.before != nil {
						sc.before(t, f)
					}
					opts := sc.opts
					if fresh {
						opts.IndexFresh = true
						settled()
					}
					b := capture(t, f, opts)
					if st := b.Stats(); fresh && st.SlowPath == "" && st.StatFromIndex == 0 {
						t.Fatalf("stats %+v: no stat data taken from the index", st)
					}
					if sc.gate != nil {
						sc.gate(t, f)
					}
					r := check(t, b)
					assertReport(t, r, sc.want, sc.wantIgnored)
				})
			}
		}
	}
}

func assertReport(t *testing.T, r *Report, want []Violation, wantIgnored []string) {
	t.Helper()
	ok := len(r.Violations) == len(want)
	for i := 0; ok && i < len(want); i++ {
		got := r.Violations[i]
		ok = got.Path == want[i].Path && got.Kind == want[i].Kind && strings.Contains(got.Detail, want[i].Detail)
	}
	if !ok {
		t.Errorf("violations:\n got  %q\n want %q\nsummary: %s", r.Violations, want, r.Summary())
	}
	if !slices.Equal(r.Ignored, wantIgnored) && (len(r.Ignored) > 0 || len(wantIgnored) > 0) {
		t.Errorf("ignored: got %q, want %q", r.Ignored, wantIgnored)
	}
	if r.Clean() != (len(want) == 0) {
		t.Errorf("Clean() = %v with %d violations", r.Clean(), len(r.Violations))
	}
}
