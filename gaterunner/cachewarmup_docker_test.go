package gaterunner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// goGateImage is the Go gates' image `make images` builds.
const goGateImage = "supervisor/sandbox-go:latest"

// vetRuns matches the vet runs in go test -x's output.
var vetRuns = regexp.MustCompile(`(?m)/vet .*vet\.cfg`)

// TestCacheWarmupServesGoTest: after the gate runner's warm-up (its own
// commands, with "std" narrowed to testing, which imports all that the
// gate's package and its test import, so that it takes seconds), a gate's
// go vet and go test vet its own package only, not the standard packages
// it imports; with a cold cache of their own they vet them all (PERF-64,
// PERF-79). With a toolchain from Go 1.26.11 on, whose vet cache keys
// tell a dependency's facts from a vetted package's, a warm-up vetting
// the standard packages themselves (go vet std) fails this.
func TestCacheWarmupServesGoTest(t *testing.T) {
	t.Parallel()
	sandboxtest.Engine(t)
	warm := CacheWarmupOf("testing")
	if !slices.ContainsFunc(warm.Warmup, func(a []string) bool { return len(a) > 1 && a[1] == "test" }) {
		t.Fatal("the warm-up has no go test vet pass")
	}
	warm.Dir = t.TempDir()
	host := fmt.Sprintf("gaterunner-test-%d-%s", os.Getpid(), t.Name())
	sandboxtest.ExpectNoContainers(t, sandbox.LabelHost+"="+host)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, err := sandbox.NewDocker(ctx, sandbox.DockerOptions{Host: host, Image: goGateImage, Caches: warm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if _, err := d.ImageDigest(ctx, goGateImage); err != nil {
		testkit.Missing(t, "the image "+goGateImage+" (make images): "+err.Error())
	}
	if err := d.WarmCaches(ctx, ""); err != nil {
		t.Fatal(err)
	}
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"go.mod":        "module example.com/greet\n\ngo 1.21\n",
		"greet.go":      "package greet\n\nimport \"strings\"\n\n// Shout shouts.\nfunc Shout(s string) string { return strings.ToUpper(s) }\n",
		"greet_test.go": "package greet\n\nimport \"testing\"\n\nfunc TestShout(t *testing.T) {\n\tif Shout(\"a\") != \"A\" {\n\t\tt.Fatal(\"no\")\n\t}\n}\n",
	} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// vets runs argv (with -x) as a gate and counts its vet runs.
	vets := func(env map[string]string, argv ...string) int {
		t.Helper()
		e := map[string]string{"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "GOPROXY": "off"}
		for k, v := range env {
			e[k] = v
		}
		res, err := d.Run(ctx, sandbox.Spec{Argv: argv, Workspace: ws, Env: e, Caches: GoCaches, Timeout: 5 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: %v, %+v\n%s", argv, err, res, res.Stderr)
		}
		return len(vetRuns.FindAll(res.Stderr, -1))
	}
	cold := map[string]string{"GOCACHE": "/tmp/cold"}
	for _, argv := range [][]string{
		{"go", "vet", "-x", "./..."},
		{"go", "test", "-x", "-count=1", "./..."},
	} {
		if n := vets(nil, argv...); n != 1 {
			t.Errorf("a warm %q ran vet %d times; want once, on its own package", argv, n)
		}
		if n := vets(cold, argv...); n < 10 {
			t.Errorf("%q with a cold cache of its own ran vet %d times; want one per imported package (the assertion above proves nothing)", argv, n)
		}
	}
}
