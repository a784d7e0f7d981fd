package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// goImage is the image with Go that `make images` builds.
const goImage = "supervisor/sandbox-go:latest"

// goTestCaches are Go's caches as the gate runner gives them.
var goTestCaches = []Cache{{Path: ".cache/go-build", Env: "GOCACHE"}, {Path: "go/pkg/mod", Env: "GOMODCACHE"}}

// goEnv is a Go gate's environment: no toolchain download, no network.
var goEnv = map[string]string{"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "GOPROXY": "off"}

// compilesFmt matches go build -x's compile of package fmt.
var compilesFmt = regexp.MustCompile(`(?m)/compile .*-p fmt `)

// TestDockerGoCacheIsWarm: after the warm-up (go build fmt, with no
// workspace), a gate's go build finds fmt in its build cache and compiles
// only its own package, also after an earlier gate ran go clean -cache in
// its view; a gate that points GOCACHE elsewhere compiles fmt. It needs
// supervisor/sandbox-go (make images); without it the test skips, or
// fails under CI=true.
func TestDockerGoCacheIsWarm(t *testing.T) {
	d, _ := dockerTest(t, DockerOptions{Caches: CacheOptions{
		Dir:        t.TempDir(),
		Warmup:     [][]string{{"go", "build", "fmt"}},
		WarmCaches: goTestCaches,
		WarmEnv:    goEnv,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := d.ImageDigest(ctx, goImage); err != nil {
		testkit.Missing(t, "the image "+goImage+" (make images): "+err.Error())
	}
	if err := d.WarmCaches(ctx, goImage); err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t)
	for name, body := range map[string]string{
		"go.mod":  "module example.com/hello\n\ngo 1.21\n",
		"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n",
	} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(env map[string]string, argv ...string) Result {
		t.Helper()
		e := map[string]string{}
		for k, v := range goEnv {
			e[k] = v
		}
		for k, v := range env {
			e[k] = v
		}
		res := runDocker(t, d, Spec{Argv: argv, Workspace: ws, Image: goImage, Env: e, Caches: goTestCaches, Timeout: 5 * time.Minute})
		if res.ExitCode != 0 {
			t.Fatalf("%v: exit %d, signal %q, timed out %v, OOM %v\n%s", argv, res.ExitCode, res.Signal, res.TimedOut, res.OOMKilled, lastBytes(res.Stderr))
		}
		return res
	}
	build := []string{"go", "build", "-x", "-o", "/dev/null", "."}
	res := run(nil, build...)
	if compilesFmt.Match(res.Stderr) {
		t.Errorf("a warm gate compiled fmt:\n%s", res.Stderr)
	}
	if !regexp.MustCompile(`(?m)/compile .*-p main `).Match(res.Stderr) {
		t.Errorf("the gate did not compile its own package (is -x output as expected?):\n%s", res.Stderr)
	}
	run(nil, "go", "clean", "-cache")
	if res := run(nil, build...); compilesFmt.Match(res.Stderr) {
		t.Errorf("after a gate emptied its cache, the next one compiled fmt:\n%s", res.Stderr)
	}
	if res := run(map[string]string{"GOCACHE": "/tmp/cold"}, build...); !compilesFmt.Match(res.Stderr) {
		t.Errorf("a gate with a cold cache of its own did not compile fmt (the assertion above proves nothing):\n%s", res.Stderr)
	}
}

// lastBytes returns the last 2000 bytes of b.
func lastBytes(b []byte) []byte {
	if len(b) > 2000 {
		return b[len(b)-2000:]
	}
	return b
}
