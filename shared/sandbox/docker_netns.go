package sandbox

import (
	"fmt"
	"path"
	"path/filepath"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

// A network namespace of its own for every container with no network,
// without the engine's network set-up (PERF-76).
//
// A container created with NetworkMode "none" still goes through the
// engine's network controller: a sandbox of its own, a hook through which
// the runtime runs the engine's binary again for the new namespace, and
// their release at the end;
// on this project's bench engines that is 0.15–0.3 s of CPU a container,
// a third or more of its whole cost. A container created with
// networking disabled as well (Config.NetworkDisabled) skips the
// controller: the runtime creates the container's network namespace as it
// creates its other namespaces, with the loopback interface up and nothing
// else, the way it does for "none". The engine then writes no /etc/hosts,
// so the sandbox mounts its own, read-only: localhost and the IPv6
// loopback names, as the engine writes them for "none". NetworkMode stays
// "none", so that an engine which ignored NetworkDisabled would still give
// the container no network.
//
// The hosts file is written once, in the cache directory (which a runner
// in a container maps to the engine's host, and which every worker and
// gate runner has). A sandbox without one has nowhere it knows the engine
// can read, so its containers get the engine's "none" set-up, as does a
// container with a mount or cache of its own at /etc/hosts or /etc.

// hostsContent is the /etc/hosts of a container with no network.
const hostsContent = "127.0.0.1\tlocalhost\n" +
	"::1\tlocalhost ip6-localhost ip6-loopback\n" +
	"fe00::0\tip6-localnet\n" +
	"ff00::0\tip6-mcastprefix\n" +
	"ff02::1\tip6-allnodes\n" +
	"ff02::2\tip6-allrouters\n"

// hostsTarget is where a container sees the hosts file.
const hostsTarget = "/etc/hosts"

// writeHosts writes the hosts file of containers with no network into
// dir and returns its path.
func writeHosts(dir string) (string, error) {
	path := filepath.Join(dir, "hosts")
	// Replaced whole: a container may be mounting the file that is there.
	if err := replaceFile(path, []byte(hostsContent), 0o644); err != nil {
		return "", fmt.Errorf("sandbox: hosts file: %w", err)
	}
	return path, nil
}

// withoutNetwork gives a container about to be created with cfg and
// hostCfg, if it has no network (NetworkMode "none"), its own namespace
// without the engine's network set-up, when the sandbox has a hosts file
// to mount and none of the container's mounts (its caches among them) is
// at /etc/hosts or /etc.
func (d *Docker) withoutNetwork(cfg *container.Config, hostCfg *container.HostConfig) {
	if d.hosts == "" || hostCfg.NetworkMode != "none" {
		return
	}
	taken := func(target string) bool {
		t := path.Clean(target)
		return t == hostsTarget || t == path.Dir(hostsTarget)
	}
	for _, m := range hostCfg.Mounts {
		if taken(m.Target) {
			return
		}
	}
	for t := range hostCfg.Tmpfs {
		if taken(t) {
			return
		}
	}
	cfg.NetworkDisabled = true
	hostCfg.Mounts = append(hostCfg.Mounts, mount.Mount{
		Type: mount.TypeBind, Source: d.HostPath(d.hosts), Target: hostsTarget, ReadOnly: true,
	})
}
