package sandbox

import (
	"context"
	"reflect"
	"testing"

	"github.com/docker/docker/api/types/container"
)

// GPUs become a device request of the NVIDIA driver (docker run --gpus N);
// no GPU is needed to check the configuration.
func TestDockerGPUDeviceRequests(t *testing.T) {
	ws := newWorkspace(t)
	for _, n := range []int{0, 2} {
		d, err := NewDocker(context.Background(), DockerOptions{Image: "img:1", GPUs: n, Host: "h"})
		if err != nil {
			t.Fatal(err)
		}
		_, hostCfg, _, err := d.containerConfig(Spec{Argv: []string{"x"}, Workspace: ws}, ws)
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		var want []container.DeviceRequest
		if n > 0 {
			want = []container.DeviceRequest{{Driver: "nvidia", Count: n, Capabilities: [][]string{{"gpu"}}}}
		}
		if got := hostCfg.DeviceRequests; !reflect.DeepEqual(got, want) {
			t.Errorf("GPUs %d: device requests %+v, want %+v", n, got, want)
		}
	}
}
