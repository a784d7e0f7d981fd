package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcessCachesCannotBePoisoned: in the process sandbox with a sandbox
// user, a cache is a farm of hard links to the runner's read-only trusted
// files: the command cannot change them in place, may replace them and
// add entries in its own farm, and the next run sees the trusted content
// only; an absolute cache is skipped, and XDG_CACHE_HOME is the run's own.
func TestProcessCachesCannotBePoisoned(t *testing.T) {
	needRoot(t)
	dir := reachableDir(t)
	caches := []Cache{{Path: ".cache/tool", Env: "TOOL_CACHE"}, {Path: "/var/cache/npm", Env: "NPM_CACHE"}}
	u := DefaultRunAs
	p := NewProcess(ProcessOptions{ScratchRoot: reachableDir(t), CacheDir: filepath.Join(dir, "shared"), RunAs: &u,
		Caches: CacheOptions{
			Dir:        filepath.Join(dir, "caches"),
			Warmup:     [][]string{{"sh", "-c", `mkdir -p "$TOOL_CACHE/sub" && printf trusted > "$TOOL_CACHE/sub/entry"`}},
			WarmCaches: caches[:1],
		}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WarmCaches(ctx); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(dir, "caches", "trusted", processEnvKey, CacheKey(".cache/tool"), "sub", "entry")
	if got := readFile(t, entry); got != "trusted" {
		t.Fatalf("trusted layer: entry %q, want the warm-up's", got)
	}

	run := func(script string) Result {
		t.Helper()
		ws := reachableDir(t)
		res, err := p.Run(ctx, Spec{Argv: []string{"sh", "-c", script}, Workspace: ws, Caches: caches})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// In place: refused.
	for _, script := range []string{
		`printf ' poisoned' >> "$TOOL_CACHE/sub/entry"`,
		`chmod 666 "$TOOL_CACHE/sub/entry"`,
	} {
		if res := run(script); res.ExitCode == 0 {
			t.Errorf("%s: exit 0, want a refusal", script)
		}
	}
	// In its own farm: allowed.
	res := run(`rm "$TOOL_CACHE/sub/entry" && printf poisoned > "$TOOL_CACHE/sub/entry" && printf planted > "$TOOL_CACHE/new" && cat "$TOOL_CACHE/sub/entry"`)
	if res.ExitCode != 0 || string(res.Stdout) != "poisoned" {
		t.Fatalf("replacing in its own farm: exit %d, %q %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = run(`cat "$TOOL_CACHE/sub/entry"; echo; ls "$TOOL_CACHE"; echo "npm=${NPM_CACHE-unset} xdg=$XDG_CACHE_HOME home=$HOME"`)
	out := string(res.Stdout)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "trusted" || lines[1] != "sub" || !strings.HasPrefix(lines[2], "npm=unset xdg=") {
		t.Fatalf("the next run saw:\n%s(stderr %s)\nwant the trusted entry alone, no NPM_CACHE", out, res.Stderr)
	}
	var xdg, home string
	for _, f := range strings.Fields(lines[2]) {
		if v, ok := strings.CutPrefix(f, "xdg="); ok {
			xdg = v
		}
		if v, ok := strings.CutPrefix(f, "home="); ok {
			home = v
		}
	}
	if xdg != filepath.Join(home, ".cache") {
		t.Errorf("XDG_CACHE_HOME %q, want the run's own %s/.cache", xdg, home)
	}
	if got := readFile(t, entry); got != "trusted" {
		t.Errorf("trusted layer on the host: entry %q, want it unchanged", got)
	}
	if fi, err := os.Stat(entry); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Errorf("trusted entry: %v, mode %v; want read-only", err, fi.Mode())
	}
}

// TestProcessCachesOwnUser: without a sandbox user the process sandbox
// cannot protect a cache, so it ignores Spec.Caches: the command keeps the
// shared XDG_CACHE_HOME, and no cache variable is set.
func TestProcessCachesOwnUser(t *testing.T) {
	shared := t.TempDir()
	p := NewProcess(ProcessOptions{CacheDir: shared, Caches: CacheOptions{Dir: t.TempDir()}})
	res, err := p.Run(context.Background(), Spec{Argv: []string{"sh", "-c", `echo "xdg=$XDG_CACHE_HOME tool=${TOOL_CACHE-unset}"`},
		Workspace: t.TempDir(), Caches: toolCaches})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(res.Stdout)), "xdg="+shared+" tool=unset"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestCloseStopsWarmup (PERF-49): a warm-up still running when its sandbox
// is closed is stopped: Close returns without waiting for the command to
// end, the command is gone, nothing it wrote becomes a trusted layer, and
// no warm-up starts afterwards.
func TestCloseStopsWarmup(t *testing.T) {
	needRoot(t)
	dir, out := reachableDir(t), reachableDir(t)
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	u := DefaultRunAs
	p := NewProcess(ProcessOptions{ScratchRoot: reachableDir(t), RunAs: &u,
		Caches: CacheOptions{
			Dir:        filepath.Join(dir, "caches"),
			Warmup:     [][]string{{"sh", "-c", `echo partial > "$TOOL_CACHE/entry"; echo $$ > ` + out + `/pid; exec sleep 60`}},
			WarmCaches: toolCaches,
		}})
	warmed := make(chan error, 1)
	go func() { warmed <- p.WarmCaches(context.Background()) }()
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; {
		if b, err := os.ReadFile(filepath.Join(out, "pid")); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			t.Fatal("the warm-up command did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { _ = p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for the warm-up's command to end")
	}
	if err := <-warmed; err != nil {
		t.Fatalf("WarmCaches: %v", err)
	}
	if alive(pid) {
		t.Errorf("the warm-up's command (pid %d) is still running", pid)
	}
	if _, err := os.Stat(filepath.Join(dir, "caches", "trusted", processEnvKey)); !os.IsNotExist(err) {
		t.Errorf("a stopped warm-up was published as a trusted layer (stat: %v)", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "caches", "trusted")); len(ents) != 0 {
		t.Errorf("trusted/ holds %d entries after a stopped warm-up, want none", len(ents))
	}
	if err := p.WarmCaches(context.Background()); err != nil {
		t.Fatalf("WarmCaches after Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "caches", "trusted", processEnvKey)); !os.IsNotExist(err) {
		t.Error("a warm-up ran after Close")
	}
}

// TestWarmupRedoneWhenPartialOrChanged (PERF-71): a warm-up whose command
// failed publishes what it wrote as a partial layer, which runs use, and
// the next sandbox started on the directory warms up again; a completed
// warm-up is not redone by the next sandbox with the same configuration,
// and is redone when its commands change. The layer a warm-up replaces is
// set aside for the runs that may still have it mounted.
func TestWarmupRedoneWhenPartialOrChanged(t *testing.T) {
	needRoot(t)
	dir, out := reachableDir(t), reachableDir(t)
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	caches := filepath.Join(dir, "caches")
	// Each warm-up command counts its runs in out/runs, then writes the
	// cache entry.
	warm := func(entry string, then ...[]string) [][]string {
		return append([][]string{{"sh", "-c", `echo x >> ` + out + `/runs; printf ` + entry + ` > "$TOOL_CACHE/entry"`}}, then...)
	}
	u := DefaultRunAs
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// start starts a sandbox on the directory (a runner's start), lets it
	// warm up, and returns what a run sees in the cache, the warm-up runs
	// so far and the trusted layer's records.
	start := func(warmup [][]string) (seen string, runs int, complete, partial bool) {
		t.Helper()
		p := NewProcess(ProcessOptions{ScratchRoot: reachableDir(t), RunAs: &u,
			Caches: CacheOptions{Dir: caches, Warmup: warmup, WarmCaches: toolCaches[:1]}})
		defer p.Close()
		if err := p.WarmCaches(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := p.Run(ctx, Spec{Argv: []string{"sh", "-c", `cat "$TOOL_CACHE/entry"`}, Workspace: reachableDir(t), Caches: toolCaches[:1]})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(out, "runs"))
		layer := filepath.Join(caches, "trusted", processEnvKey)
		_, errC := os.Stat(filepath.Join(layer, ".complete"))
		_, errP := os.Stat(filepath.Join(layer, ".partial"))
		return string(res.Stdout), strings.Count(string(b), "x"), errC == nil, errP == nil
	}
	check := func(step, seen string, runs int, complete, partial bool, wantSeen string, wantRuns int, wantComplete bool) {
		t.Helper()
		if seen != wantSeen || runs != wantRuns || complete != wantComplete || partial == wantComplete {
			t.Errorf("%s: a run saw %q after %d warm-up runs, .complete %v, .partial %v; want %q after %d, .complete %v",
				step, seen, runs, complete, partial, wantSeen, wantRuns, wantComplete)
		}
	}

	failing := warm("one", []string{"sh", "-c", "exit 3"})
	seen, runs, complete, partial := start(failing)
	check("a failed warm-up", seen, runs, complete, partial, "one", 1, false)
	seen, runs, complete, partial = start(warm("two"))
	check("the next start after a failed warm-up", seen, runs, complete, partial, "two", 2, true)
	seen, runs, complete, partial = start(warm("two"))
	check("the next start with the same warm-up", seen, runs, complete, partial, "two", 2, true)
	seen, runs, complete, partial = start(warm("three"))
	check("the next start with another warm-up", seen, runs, complete, partial, "three", 3, true)

	// The two layers replaced are set aside, dated when they were.
	ents, err := os.ReadDir(filepath.Join(caches, "trusted"))
	if err != nil {
		t.Fatal(err)
	}
	var old []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), processEnvKey+".old-") {
			old = append(old, e.Name())
			if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) > time.Minute {
				t.Errorf("%s: dated %v, want when it was replaced", e.Name(), fi.ModTime())
			}
		}
	}
	if len(old) != 2 {
		t.Errorf("trusted/ holds %d replaced layers (%v), want 2", len(old), old)
	}
}

// TestWarmupFilesAndSharedWorkspace (PERF-79): the warm-up's commands run
// in one workspace that starts with CacheOptions.WarmFiles, so a command
// reads the files and what an earlier command wrote there; a file whose
// path leaves the workspace fails the warm-up before any command runs.
func TestWarmupFilesAndSharedWorkspace(t *testing.T) {
	needRoot(t)
	u := DefaultRunAs
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// seen warms a fresh cache directory with files and returns what a
	// run then finds in the cache ("" if nothing: the warm-up failed).
	seen := func(files map[string]string) string {
		t.Helper()
		p := NewProcess(ProcessOptions{ScratchRoot: reachableDir(t), RunAs: &u,
			Caches: CacheOptions{Dir: filepath.Join(reachableDir(t), "caches"), WarmFiles: files, WarmCaches: toolCaches[:1],
				Warmup: [][]string{
					{"sh", "-c", `cat gen/input > made`},
					{"sh", "-c", `cat made gen/input > "$TOOL_CACHE/entry"`},
				}}})
		defer p.Close()
		if err := p.WarmCaches(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := p.Run(ctx, Spec{Argv: []string{"sh", "-c", `cat "$TOOL_CACHE/entry" 2>/dev/null; true`},
			Workspace: reachableDir(t), Caches: toolCaches[:1]})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}
	if got := seen(map[string]string{"gen/input": "a;"}); got != "a;a;" {
		t.Errorf("the cache holds %q after the warm-up; want %q (the file, read by both commands, the second reading the first's output)", got, "a;a;")
	}
	if got := seen(map[string]string{"gen/input": "a;", "../outside": "x"}); got != "" {
		t.Errorf("a warm-up with a file outside its workspace left %q in the cache; want it not run", got)
	}
}
