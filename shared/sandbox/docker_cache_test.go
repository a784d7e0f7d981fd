package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tests of the caches' trusted and throw-away layers in the Docker
// sandbox (PERF-20…PERF-22), against the real engine.

// toolCaches are the caches of the poisoning tests: one relative to HOME,
// one absolute.
var toolCaches = []Cache{{Path: ".cache/tool", Env: "TOOL_CACHE"}, {Path: "/var/cache/npm", Env: "NPM_CACHE"}}

// readFile returns a file's content, failing the test if it cannot.
func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDockerCachesCannotBePoisoned: a gate that overwrites, appends to,
// chmods, removes and adds entries of its caches sees its own writes, but
// the next gate sees the trusted content only (the warm-up's and the
// operator's seed), and the trusted layers on the host are unchanged.
func TestDockerCachesCannotBePoisoned(t *testing.T) {
	dir := t.TempDir()
	d, img := dockerTest(t, DockerOptions{Caches: CacheOptions{
		Dir: dir,
		Warmup: [][]string{
			{"probe", "write-text", "/tmp/.cache/tool/entry", "trusted"},
			{"probe", "write-text", "/var/cache/npm/entry", "trusted npm"},
		},
		WarmCaches: toolCaches,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seed := filepath.Join(dir, "seed", CacheKey(".cache/tool"))
	if err := os.MkdirAll(seed, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(seed, "seeded"), []byte("operator"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := d.WarmCaches(ctx, img); err != nil {
		t.Fatal(err)
	}
	id, err := d.ImageDigest(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	if !DockerCachesWarmed(dir, id) || DockerCachesWarmed(dir, "sha256:another") {
		t.Fatalf("DockerCachesWarmed: %v for the image warmed, %v for another; want true, false",
			DockerCachesWarmed(dir, id), DockerCachesWarmed(dir, "sha256:another"))
	}
	trusted := filepath.Join(dir, "trusted", envKey(id))
	entry := filepath.Join(trusted, CacheKey(".cache/tool"), "entry")
	if got := readFile(t, entry); got != "trusted" {
		t.Fatalf("trusted layer: entry %q, want the warm-up's", got)
	}
	if fi, err := os.Stat(entry); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("trusted entry: %v, mode %v; want read-only", err, fi.Mode())
	}

	run := func(argv ...string) Result {
		t.Helper()
		return runDocker(t, d, Spec{Argv: argv, Workspace: newWorkspace(t), Image: img, Caches: toolCaches})
	}
	// The poisoner. Writing a trusted file in place is refused (it is
	// read-only) or, where the gate may change it (chmod as its owner),
	// lands in the gate's own layer; new entries and removals do too.
	for _, step := range []struct {
		argv    []string
		mustRun bool
	}{
		{[]string{"probe", "append", "/tmp/.cache/tool/entry", " poisoned in place"}, false},
		{[]string{"probe", "chmod", "/tmp/.cache/tool/entry", "666"}, false},
		{[]string{"probe", "write-text", "/tmp/.cache/tool/entry", "poisoned"}, false},
		{[]string{"probe", "write-text", "/var/cache/npm/entry", "poisoned npm"}, false},
		{[]string{"probe", "write-text", "/tmp/.cache/tool/new", "planted"}, true},
		{[]string{"probe", "remove", "/tmp/.cache/tool/seeded"}, true},
		{[]string{"probe", "write-text", "/var/cache/npm/new", "planted"}, true},
	} {
		res := run(step.argv...)
		t.Logf("%v: exit %d %s%s", step.argv, res.ExitCode, res.Stdout, res.Stderr)
		if step.mustRun && res.ExitCode != 0 {
			t.Fatalf("%v: exit %d, stderr %s; the gate should be able to write its own view", step.argv, res.ExitCode, res.Stderr)
		}
	}
	// The next gate sees the trusted content only.
	res := run("probe", "cat", "/tmp/.cache/tool/entry", "/tmp/.cache/tool/new", "/tmp/.cache/tool/seeded",
		"/var/cache/npm/entry", "/var/cache/npm/new")
	want := "/tmp/.cache/tool/entry: trusted\n/tmp/.cache/tool/new: <missing>\n/tmp/.cache/tool/seeded: operator\n" +
		"/var/cache/npm/entry: trusted npm\n/var/cache/npm/new: <missing>\n"
	if string(res.Stdout) != want {
		t.Errorf("the next gate read\n%s\nwant\n%s(stderr %s)", res.Stdout, want, res.Stderr)
	}
	if got := readFile(t, entry); got != "trusted" {
		t.Errorf("trusted layer on the host: entry %q, want it unchanged", got)
	}
	if got := readFile(t, filepath.Join(seed, "seeded")); got != "operator" {
		t.Errorf("seed on the host: %q, want it unchanged", got)
	}
	// The caches' variables, and nothing left of the runs' layers.
	env := string(run("probe", "env").Stdout)
	for _, kv := range []string{"TOOL_CACHE=/tmp/.cache/tool", "NPM_CACHE=/var/cache/npm"} {
		if !strings.Contains(env, kv+"\n") {
			t.Errorf("environment lacks %s:\n%s", kv, env)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(dir, "runs")); err != nil || len(ents) != 0 {
		t.Errorf("runs: %v, %d entries left; want none", err, len(ents))
	}
}

// TestDockerCachesOwnVariable: a spec that sets a cache's variable itself
// keeps its value (the cache goes unused).
func TestDockerCachesOwnVariable(t *testing.T) {
	d, img := dockerTest(t, DockerOptions{Caches: CacheOptions{Dir: t.TempDir()}})
	res := runDocker(t, d, Spec{Argv: []string{"probe", "env"}, Workspace: newWorkspace(t), Image: img,
		Caches: toolCaches, Env: map[string]string{"TOOL_CACHE": "/tmp/mine"}})
	if env := string(res.Stdout); !strings.Contains(env, "TOOL_CACHE=/tmp/mine\n") || !strings.Contains(env, "NPM_CACHE=/var/cache/npm\n") {
		t.Errorf("environment:\n%s\nwant TOOL_CACHE=/tmp/mine and NPM_CACHE=/var/cache/npm", env)
	}
}

// TestCachesInvalid: caches that break protocol.CheckCacheDir, overlap or
// name a denied variable are refused before anything runs.
func TestCachesInvalid(t *testing.T) {
	for _, caches := range [][]Cache{
		{{Path: "../x"}},
		{{Path: "/workspace/x"}},
		{{Path: "a,b"}},
		{{Path: "./a"}},
		{{Path: ".npm"}, {Path: ".npm/x"}},
		{{Path: ".npm", Env: "LD_PRELOAD"}},
	} {
		p := NewProcess(ProcessOptions{})
		_, err := p.Run(context.Background(), Spec{Argv: []string{"true"}, Workspace: t.TempDir(), Caches: caches})
		if err == nil || !strings.Contains(err.Error(), "invalid spec") {
			t.Errorf("caches %+v: error %v, want ErrInvalidSpec", caches, err)
		}
	}
}

// TestDockerCloseStopsWarmup (PERF-49): a warm-up whose container is still
// running when the sandbox is closed is stopped with it: its container is
// removed (none of the runner's is left), nothing it wrote becomes a
// trusted layer, and Close does not wait for the command to end.
func TestDockerCloseStopsWarmup(t *testing.T) {
	dir := t.TempDir()
	d, img := dockerTest(t, DockerOptions{Caches: CacheOptions{
		Dir: dir,
		Warmup: [][]string{
			{"probe", "write-text", "/tmp/.cache/tool/entry", "partial"},
			{"probe", "sleep", "10m"},
		},
		WarmCaches: toolCaches,
	}})
	id, err := d.ImageDigest(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	warmed := make(chan error, 1)
	go func() { warmed <- d.WarmCaches(context.Background(), img) }()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if len(listContainers(t, d, d.host)) > 0 {
			ents, _ := os.ReadDir(filepath.Join(dir, "trusted"))
			if len(ents) > 0 { // the staging directory: past the first command
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the warm-up's container did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the sleeping command's container is up
	closed := make(chan struct{})
	go func() { _ = d.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Minute):
		t.Fatal("Close waited for the warm-up's command to end")
	}
	if err := <-warmed; err != nil {
		t.Fatalf("WarmCaches: %v", err)
	}
	if n := len(listContainers(t, d, d.host)); n != 0 {
		t.Errorf("%d warm-up container(s) left after Close", n)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "trusted")); len(ents) != 0 {
		t.Errorf("trusted/ holds %d entries after a stopped warm-up, want none", len(ents))
	}
	if DockerCachesWarmed(dir, id) {
		t.Error("DockerCachesWarmed after a stopped warm-up, want false")
	}
}

// TestDockerCachesOfRemovedImagesPruned: once a warm-up is done, the
// trusted layers of images the engine no longer has are set aside (named
// .old-, dated now) and the ones set aside longer ago than staleLayers
// are removed; the layers of images it has, the process sandbox's and
// those set aside lately stay.
func TestDockerCachesOfRemovedImagesPruned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, img := dockerTest(t, DockerOptions{Caches: CacheOptions{
		Dir:        dir,
		Warmup:     [][]string{{"probe", "write-text", "/tmp/.cache/tool/entry", "warm"}},
		WarmCaches: toolCaches[:1],
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	trusted := filepath.Join(dir, "trusted")
	layer := func(name string, age time.Duration) string {
		t.Helper()
		p := filepath.Join(trusted, name)
		if err := os.MkdirAll(filepath.Join(p, CacheKey(".cache/tool")), 0o755); err != nil {
			t.Fatal(err)
		}
		if age > 0 {
			then := time.Now().Add(-age)
			if err := os.Chtimes(p, then, then); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	goneEnv := envKey("sha256:" + strings.Repeat("0", 64))
	gone := layer(goneEnv, 0)
	process := layer(processEnvKey, 0)
	staleAside := layer(envKey("sha256:"+strings.Repeat("1", 64))+".old-0a0a0a", staleLayers+time.Hour)
	freshAside := layer(envKey("sha256:"+strings.Repeat("2", 64))+".old-0b0b0b", time.Minute)

	if err := d.WarmCaches(ctx, img); err != nil {
		t.Fatal(err)
	}
	id, err := d.ImageDigest(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	if !DockerCachesWarmed(dir, id) {
		t.Fatal("the image's own layer is not warmed")
	}
	for _, p := range []string{process, freshAside, filepath.Join(trusted, envKey(id))} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v; want it kept", filepath.Base(p), err)
		}
	}
	for _, p := range []string{gone, staleAside} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: %v; want it gone from its name", filepath.Base(p), err)
		}
	}
	// The removed image's layer is set aside, dated now, with its content.
	ents, err := os.ReadDir(trusted)
	if err != nil {
		t.Fatal(err)
	}
	var aside []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), goneEnv+".old-") {
			aside = append(aside, e.Name())
		}
	}
	if len(aside) != 1 {
		t.Fatalf("trusted/ holds %d layers set aside for the removed image, want 1", len(aside))
	}
	fi, err := os.Stat(filepath.Join(trusted, aside[0]))
	if err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Errorf("the layer set aside: %v, dated %v; want it dated now", err, fi.ModTime())
	}
	if _, err := os.Stat(filepath.Join(trusted, aside[0], CacheKey(".cache/tool"))); err != nil {
		t.Errorf("the layer set aside lost its content: %v", err)
	}
	// A second prune finds nothing more to set aside.
	if again := d.pruneCaches(ctx); len(again) != 0 {
		t.Errorf("second prune set aside %v, want nothing", again)
	}
}
