// Package sandboxtest is for tests only: it gives any module's tests the
// real Docker engine, the probe image the Docker sandbox is tested with,
// and small images built from a few files (Image, StaticBinary).
//
// The probe image is built from the probe program (the probe directory of
// this package, a command whose subcommands each check one property of a
// sandbox: write files, connect, print its environment, …) on top of
// scratch, so nothing is ever pulled. ProbeImage builds it once per test
// binary; the binary's TestMain must remove it once the tests have run
// (Main does, or call Cleanup after m.Run):
//
//	func TestMain(m *testing.M) { sandboxtest.Main(m) }
//
// Without an engine the tests that need one skip, or fail under CI=true
// (testkit.Missing).
//
// This package must not import package sandbox: the sandbox package's own
// tests import it.
package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

const (
	// ProbePackage is the import path of the probe program, built with
	// `go build` from the test's own module (which must require this one).
	ProbePackage = "github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest/probe"
	// ProbePath is where the probe lies in the image; it is on the
	// sandbox's base PATH, so an argv of "probe", … finds it.
	ProbePath = "/usr/local/bin/probe"
	// ProbeRepository is the repository part of the probe image's tags.
	ProbeRepository = "supervisor-test/probe"
	// ProbeEntrypointExit is the exit status of the image's entrypoint
	// (probe exit 42): a sandbox that does not clear the entrypoint runs it
	// instead of the command.
	ProbeEntrypointExit = 42
	// LabelTest marks every image this package builds ("1").
	LabelTest = "supervisor.test"

	pingTimeout   = 10 * time.Second
	buildTimeout  = 3 * time.Minute
	removeTimeout = 30 * time.Second
)

// shared is the engine client and the probe image of this test binary.
var shared struct {
	clientOnce sync.Once
	cli        *client.Client
	clientErr  error

	probeOnce sync.Once
	image     string
	probeErr  error

	helperOnce sync.Once
	helper     string
	helperErr  error
}

// HelperPackage is the import path of supervisor-sandbox-helper, the
// program containers started ahead of their job run
// (sandbox.DockerOptions.Prestart).
const HelperPackage = "github.com/supervisorhq/supervisor/shared/sandbox/cmd/supervisor-sandbox-helper"

// Helper returns the path of supervisor-sandbox-helper built for this test
// binary (once, static, in a directory Cleanup removes), for
// sandbox.DockerOptions.Helper.
func Helper(t testing.TB) string {
	t.Helper()
	shared.helperOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		bin, err := StaticBinary(ctx, "", HelperPackage)
		if err != nil {
			shared.helperErr = err
			return
		}
		dir, err := os.MkdirTemp("", "sandboxtest-helper-*")
		if err != nil {
			shared.helperErr = err
			return
		}
		shared.helper = filepath.Join(dir, "supervisor-sandbox-helper")
		shared.helperErr = os.WriteFile(shared.helper, bin, 0o755)
	})
	if shared.helperErr != nil {
		t.Fatalf("sandboxtest: helper: %v", shared.helperErr)
	}
	return shared.helper
}

// Engine returns a client of the Docker engine named by the environment
// (DOCKER_HOST, …; the local socket by default), shared by the test
// binary and closed by Cleanup. Without an engine that answers, the test
// is skipped, or failed under CI=true.
func Engine(t testing.TB) *client.Client {
	t.Helper()
	shared.clientOnce.Do(func() {
		shared.cli, shared.clientErr = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	})
	if shared.clientErr != nil {
		testkit.Missing(t, fmt.Sprintf("the Docker engine (%v)", shared.clientErr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if _, err := shared.cli.Ping(ctx); err != nil {
		testkit.Missing(t, fmt.Sprintf("the Docker engine (%v)", err))
	}
	return shared.cli
}

// HostFirewall makes sure this process can change the host's firewall
// (iptables and ip6tables answer, as root or with CAP_NET_ADMIN), which
// egress.StartGateway needs on the engine's host. Without it the test is
// skipped, or failed under CI=true.
func HostFirewall(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"iptables", "ip6tables"} {
		ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		out, err := exec.CommandContext(ctx, tool, "-w", "-n", "-L", "INPUT").CombinedOutput()
		cancel()
		if err != nil {
			testkit.Missing(t, fmt.Sprintf("%s with root or CAP_NET_ADMIN, for the egress network's host firewall (%v: %s)", tool, err, bytes.TrimSpace(out)))
		}
	}
}

// ProbeImage returns the tag of the probe image, building it the first
// time a test of the binary asks (Cleanup removes it). It skips the test
// without an engine (fails under CI=true), and fails it if the image
// cannot be built.
func ProbeImage(t testing.TB) string {
	t.Helper()
	cli := Engine(t)
	shared.probeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		shared.image, shared.probeErr = BuildProbeImage(ctx, cli)
	})
	if shared.probeErr != nil {
		t.Fatalf("sandboxtest: %v", shared.probeErr)
	}
	return shared.image
}

// Main runs the tests of m, then Cleanup, and exits: the TestMain of a
// test binary whose tests use ProbeImage or Engine.
func Main(m *testing.M) {
	code := m.Run()
	if err := Cleanup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// Cleanup removes the probe image ProbeImage built and the helper Helper
// built, if any, and closes the shared engine client. Call it from
// TestMain once m.Run has returned.
func Cleanup() error {
	if shared.helper != "" {
		_ = os.RemoveAll(filepath.Dir(shared.helper))
	}
	if shared.cli == nil {
		return nil
	}
	defer shared.cli.Close()
	if shared.image == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	return RemoveImage(ctx, shared.cli, shared.image)
}

// BuildProbeImage compiles the probe (a static Linux binary) and builds
// the image ProbeRepository:<hash of the binary>-<pid> from it: FROM
// scratch (nothing is pulled), the probe at ProbePath, an entrypoint that
// exits ProbeEntrypointExit, and the label LabelTest=1. The caller removes
// it (RemoveImage).
func BuildProbeImage(ctx context.Context, cli *client.Client) (string, error) {
	bin, err := buildProbe(ctx)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(bin)
	tag := fmt.Sprintf("%s:%s-%d", ProbeRepository, hex.EncodeToString(sum[:])[:12], os.Getpid())

	// Test binaries of several packages build this image at once, and each
	// removes its own when it ends: a label of this build's own, first, and
	// no build cache keep their images (and intermediates) apart.
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	dockerfile := fmt.Sprintf("FROM scratch\nLABEL supervisor.test.build=%d-%s\nCOPY probe %s\nENTRYPOINT [%q, \"exit\", \"%d\"]\n",
		os.Getpid(), hex.EncodeToString(nonce[:]), ProbePath, ProbePath, ProbeEntrypointExit)
	if err := BuildImage(ctx, cli, tag, File{"Dockerfile", 0o644, []byte(dockerfile)}, File{"probe", 0o755, bin}); err != nil {
		return "", fmt.Errorf("sandboxtest: the probe image: %w", err)
	}
	return tag, nil
}

// File is one file of an image's build context.
type File struct {
	Name string
	Mode int64
	Data []byte
}

// BuildImage builds the image tag from a build context of files (a
// Dockerfile among them) with the classic builder and no build cache,
// labelled LabelTest=1. The caller removes it (RemoveImage).
func BuildImage(ctx context.Context, cli *client.Client, tag string, files ...File) error {
	buildCtx, err := tarFiles(files)
	if err != nil {
		return fmt.Errorf("build context of %s: %w", tag, err)
	}
	resp, err := cli.ImageBuild(ctx, buildCtx, build.ImageBuildOptions{
		Tags: []string{tag}, Remove: true, ForceRemove: true, NoCache: true, Version: build.BuilderV1,
		Labels: map[string]string{LabelTest: "1"},
	})
	if err != nil {
		return fmt.Errorf("building %s: %w", tag, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("building %s: %w", tag, err)
		}
		if msg.Error != "" {
			return fmt.Errorf("building %s: %s", tag, msg.Error)
		}
	}
}

// Image builds the image tag from files as BuildImage does, on the engine
// of Engine (skipping the test without one, failing it under CI=true),
// and removes it when the test ends. It fails the test if the image cannot
// be built.
func Image(t testing.TB, tag string, files ...File) string {
	t.Helper()
	cli := Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	if err := BuildImage(ctx, cli, tag, files...); err != nil {
		t.Fatalf("sandboxtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		if err := RemoveImage(ctx, cli, tag); err != nil {
			t.Errorf("%v", err)
		}
	})
	return tag
}

// RemoveImage removes the image tagged tag (an image another tag still
// names only loses this tag); an image already gone is not an error.
func RemoveImage(ctx context.Context, cli *client.Client, tag string) error {
	_, err := cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("sandboxtest: removing the image %s: %w", tag, err)
	}
	return nil
}

// buildProbe compiles ProbePackage for Linux without cgo and returns the
// binary.
func buildProbe(ctx context.Context) ([]byte, error) {
	bin, err := StaticBinary(ctx, "", ProbePackage)
	if err != nil {
		return nil, fmt.Errorf("sandboxtest: %w", err)
	}
	return bin, nil
}

// StaticBinary compiles the Go package pkg with `go build` in dir ("" =
// the current directory) for Linux without cgo, stripped, with env
// ("KEY=VALUE") added to the environment, and returns the binary: a
// program an image built FROM scratch can run.
func StaticBinary(ctx context.Context, dir, pkg string, env ...string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "sandboxtest-build-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	goBin, err := exec.LookPath("go")
	if err != nil {
		// go test built this binary on this machine, so runtime.GOROOT is
		// this machine's Go (the deprecation is about binaries run elsewhere).
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // SA1019 does not apply to a test binary, see above
	}
	out := filepath.Join(tmp, "bin")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux"), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return os.ReadFile(out)
}

// tarFiles returns a tar archive of files.
func tarFiles(files []File) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: f.Mode, Size: int64(len(f.Data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

// Containers lists the containers, running or not, that carry every one
// of labels ("key=value", e.g. "supervisor.host=<host>").
func Containers(ctx context.Context, cli *client.Client, labels ...string) ([]container.Summary, error) {
	args := filters.NewArgs()
	for _, l := range labels {
		args.Add("label", l)
	}
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, fmt.Errorf("sandboxtest: listing containers: %w", err)
	}
	return list, nil
}

// ExpectNoContainers makes the test fail if, when it ends, a container
// carrying label ("key=value") is left; such containers are then removed.
// The check runs as a cleanup, after the cleanups registered later (a
// runner stopped by one of them has had its chance to clean up).
func ExpectNoContainers(t testing.TB, label string) {
	t.Helper()
	cli := Engine(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		left, err := Containers(ctx, cli, label)
		if err != nil {
			t.Errorf("%v", err)
			return
		}
		for _, c := range left {
			t.Errorf("container %.12s (%s, labels %v) left behind", c.ID, c.State, c.Labels)
			if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil &&
				!cerrdefs.IsNotFound(err) {
				t.Errorf("removing container %.12s: %v", c.ID, err)
			}
		}
	})
}
