package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

// TestWithoutNetwork (PERF-76): a container with no network gets
// networking disabled and the sandbox's hosts file, unless the sandbox has
// no hosts file, the container has a network, or something of its own (a
// cache among them) is mounted at /etc/hosts or /etc.
func TestWithoutNetwork(t *testing.T) {
	hosts, err := writeHosts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(hosts); err != nil || string(b) != hostsContent {
		t.Fatalf("hosts file: %q, %v", b, err)
	}
	if fi, err := os.Stat(hosts); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("hosts file mode: %v, %v", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(filepath.Dir(hosts))
	if len(ents) != 1 {
		t.Errorf("the hosts file's directory holds %d entries, want the file alone", len(ents))
	}
	for _, c := range []struct {
		name     string
		hosts    string
		mode     container.NetworkMode
		mounts   []mount.Mount
		tmpfs    map[string]string
		disabled bool
	}{
		{name: "no network", hosts: hosts, mode: "none", disabled: true},
		{name: "other mounts", hosts: hosts, mode: "none", mounts: []mount.Mount{{Target: "/etc/ssl"}, {Target: "/workspace"}},
			tmpfs: map[string]string{"/tmp": ""}, disabled: true},
		{name: "no hosts file", mode: "none"},
		{name: "egress network", hosts: hosts, mode: "supervisor-egress"},
		{name: "a mount at /etc", hosts: hosts, mode: "none", mounts: []mount.Mount{{Target: "/etc/"}}},
		{name: "a mount at /etc/hosts", hosts: hosts, mode: "none", mounts: []mount.Mount{{Target: "/etc/hosts"}}},
		{name: "a tmpfs at /etc", hosts: hosts, mode: "none", tmpfs: map[string]string{"/etc": ""}},
		{name: "a cache volume at /etc/hosts", hosts: hosts, mode: "none", mounts: []mount.Mount{{Type: mount.TypeVolume, Target: "/etc/hosts"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &Docker{hosts: c.hosts}
			cfg := &container.Config{}
			h := &container.HostConfig{NetworkMode: c.mode, Mounts: append([]mount.Mount(nil), c.mounts...), Tmpfs: c.tmpfs}
			d.withoutNetwork(cfg, h)
			added := len(h.Mounts) - len(c.mounts)
			if cfg.NetworkDisabled != c.disabled || added != map[bool]int{true: 1}[c.disabled] {
				t.Fatalf("networking disabled %v, %d mounts added; want %v", cfg.NetworkDisabled, added, c.disabled)
			}
			if c.disabled {
				m := h.Mounts[len(h.Mounts)-1]
				if m.Type != mount.TypeBind || m.Source != hosts || m.Target != "/etc/hosts" || !m.ReadOnly {
					t.Errorf("hosts mount %+v, want %s read-only at /etc/hosts", m, hosts)
				}
			}
			if h.NetworkMode != c.mode {
				t.Errorf("network mode %q, want %q kept", h.NetworkMode, c.mode)
			}
		})
	}
}
