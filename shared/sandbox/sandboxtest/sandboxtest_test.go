package sandboxtest_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// The probe image is the probe alone on scratch, with the test label and
// the entrypoint a sandbox must clear; RemoveImage removes it, and removing
// it twice is no error.
func TestBuildAndRemoveProbeImage(t *testing.T) {
	cli := sandboxtest.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tag, err := sandboxtest.BuildProbeImage(ctx, cli)
	if err != nil {
		t.Fatalf("BuildProbeImage: %v", err)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = sandboxtest.RemoveImage(context.Background(), cli, tag)
		}
	})
	if !strings.HasPrefix(tag, sandboxtest.ProbeRepository+":") || !strings.HasSuffix(tag, fmt.Sprintf("-%d", os.Getpid())) {
		t.Errorf("tag %q, want %s:<hash>-<pid>", tag, sandboxtest.ProbeRepository)
	}
	info, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatalf("inspect %s: %v", tag, err)
	}
	if n := len(info.RootFS.Layers); n != 1 {
		t.Errorf("%d layers, want 1 (the probe on scratch)", n)
	}
	if info.Config == nil || info.Config.Labels[sandboxtest.LabelTest] != "1" {
		t.Errorf("config %+v lacks the label %s=1", info.Config, sandboxtest.LabelTest)
	} else if want := []string{sandboxtest.ProbePath, "exit", fmt.Sprint(sandboxtest.ProbeEntrypointExit)}; !slices.Equal(info.Config.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", info.Config.Entrypoint, want)
	}

	for range 2 {
		if err := sandboxtest.RemoveImage(ctx, cli, tag); err != nil {
			t.Fatalf("RemoveImage: %v", err)
		}
	}
	removed = true
	if _, err := cli.ImageInspect(ctx, tag); !cerrdefs.IsNotFound(err) {
		t.Errorf("inspect after RemoveImage: %v, want not found", err)
	}
}

// ProbeImage builds once per test binary.
func TestProbeImageOnce(t *testing.T) {
	first := sandboxtest.ProbeImage(t)
	if again := sandboxtest.ProbeImage(t); again != first {
		t.Errorf("ProbeImage: %q then %q", first, again)
	}
	if _, err := sandboxtest.Engine(t).ImageInspect(context.Background(), first); err != nil {
		t.Errorf("inspect %s: %v", first, err)
	}
}

// Containers selects on every label given.
func TestContainers(t *testing.T) {
	cli := sandboxtest.Engine(t)
	img := sandboxtest.ProbeImage(t)
	ctx := context.Background()
	host := fmt.Sprintf("sandboxtest-%d-%s", os.Getpid(), t.Name())
	created, err := cli.ContainerCreate(ctx, &container.Config{
		Image: img, Cmd: []string{"probe", "id"}, Labels: map[string]string{"supervisor.host": host, "x": "1"},
	}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer func() {
		if err := cli.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Errorf("remove: %v", err)
		}
	}()
	for _, c := range []struct {
		labels []string
		want   int
	}{
		{[]string{"supervisor.host=" + host}, 1},
		{[]string{"supervisor.host=" + host, "x=1"}, 1},
		{[]string{"supervisor.host=" + host, "x=2"}, 0},
		{[]string{"supervisor.host=" + host + "-other"}, 0},
	} {
		list, err := sandboxtest.Containers(ctx, cli, c.labels...)
		if err != nil || len(list) != c.want {
			t.Errorf("Containers(%q): %d, %v; want %d", c.labels, len(list), err, c.want)
		} else if c.want == 1 && list[0].ID != created.ID {
			t.Errorf("Containers(%q): %s, want %s", c.labels, list[0].ID, created.ID)
		}
	}
}
