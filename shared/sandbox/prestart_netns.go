package sandbox

import (
	"context"
	"path/filepath"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/strslice"
)

// Network namespaces kept per workspace (PERF-73).
//
// A container with no network (NetworkMode "none") gets a network
// namespace of its own from the engine, and on this project's bench engine
// that is about 0.15 s of CPU a container, a third of a container's whole
// cost (the engine's hook that sets the namespace up is a process of its
// own each time), where joining another container's namespace costs
// nothing of it. With DockerOptions.Prestart, the containers of a
// workspace's jobs that have no network join the namespace of a holder
// container of that workspace instead: it runs nothing but the helper,
// sleeping, with no network but its loopback, no capabilities, a
// read-only root and tiny limits. The jobs of one workspace run one after
// the other, each in its own container whose processes are all dead
// before the next job starts, so the namespace (a loopback and nothing
// else, which a job without capabilities cannot configure) carries
// nothing from one job to the next but what the kernel keeps of closed
// connections; two workspaces never share one. A holder serves for
// holderLife at most, then a new one replaces it; its deadline label lets
// RemoveExpired remove one a dead runner left.

// LabelNetnsHolder marks a container that only holds a workspace's network
// namespace ("1").
const LabelNetnsHolder = "supervisor.netns-holder"

const (
	// holderLife is how long a holder's namespace is given to new
	// containers.
	holderLife = 30 * time.Minute
	// holderGrace is how long a replaced holder stays, for the containers
	// being created in its namespace.
	holderGrace = startTimeout + engineTimeout
)

// netnsHolder is a workspace's holder container.
type netnsHolder struct {
	id      string
	created time.Time
	used    time.Time
}

// withNetns returns host with the network namespace of the holder of
// spec's workspace in place of a namespace of its own, if host has no
// network and the holder is there or can be made; host itself otherwise
// (the container then gets its own namespace, as without holders).
func (p *prestarter) withNetns(ctx context.Context, spec Spec, cfg *container.Config, host *container.HostConfig) *container.HostConfig {
	if host.NetworkMode != "none" {
		return host
	}
	id, err := p.holder(ctx, filepath.Clean(spec.Workspace), cfg.Image)
	if err != nil {
		p.d.caches.log.Debug("sandbox: no network namespace holder; the container gets its own", "workspace", spec.Workspace, "err", err)
		return host
	}
	c := *host
	c.NetworkMode = container.NetworkMode("container:" + id)
	return &c
}

// holder returns the id of the running holder of workspace root, making
// one from image if it has none, or none that is running and young enough.
func (p *prestarter) holder(ctx context.Context, root, image string) (string, error) {
	now := time.Now()
	p.mu.Lock()
	h := p.holders[root]
	if h != nil && now.Sub(h.created) < holderLife {
		h.used = now
		p.mu.Unlock()
		// One that stopped (killed from outside) is replaced.
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
		info, err := p.d.cli.ContainerInspect(ictx, h.id)
		cancel()
		if err == nil && info.State != nil && info.State.Running {
			return h.id, nil
		}
		p.mu.Lock()
	}
	if h != nil && p.holders[root] == h {
		delete(p.holders, root)
		p.retireHolder(h)
	}
	p.mu.Unlock()

	id, err := p.createHolder(ctx, image)
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.d.remove(context.WithoutCancel(ctx), id)
		return "", errStale
	}
	if other := p.holders[root]; other != nil {
		// Another run of the workspace made one meanwhile.
		p.retireHolder(other)
	}
	p.holders[root] = &netnsHolder{id: id, created: now, used: now}
	// Holders of workspaces no run used for a while go.
	for ws, o := range p.holders {
		if now.Sub(o.used) >= prestartIdle {
			delete(p.holders, ws)
			p.retireHolder(o)
		}
	}
	return id, nil
}

// createHolder creates and starts a holder container from image.
func (p *prestarter) createHolder(ctx context.Context, image string) (string, error) {
	d := p.d
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	noInit := false
	pids := int64(4)
	c := &container.Config{
		User: "65534:65534", Image: image, Cmd: strslice.StrSlice{helperTarget, "hold"}, Entrypoint: strslice.StrSlice{},
		Labels: map[string]string{
			LabelSandbox: "1", LabelHost: d.host, LabelNetnsHolder: "1",
			LabelDeadline: strconv.FormatInt(time.Now().Add(holderLife+holderGrace).Unix(), 10),
		},
	}
	h := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        strslice.StrSlice{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		IpcMode:        container.IPCModePrivate,
		LogConfig:      container.LogConfig{Type: "none"},
		Init:           &noInit,
		Mounts:         []mount.Mount{{Type: mount.TypeBind, Source: d.HostPath(p.helper), Target: helperTarget, ReadOnly: true}},
		Resources:      container.Resources{Memory: 16 << 20, MemorySwap: 16 << 20, NanoCPUs: 1e8, PidsLimit: &pids},
	}
	id, err := d.create(ctx, c, h)
	if err != nil {
		return "", err
	}
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		d.remove(context.WithoutCancel(ctx), id)
		return "", err
	}
	return id, nil
}

// retireHolder removes h's container after holderGrace, or as soon as the
// sandbox is closing, in the background. p.mu is held, and p is not
// closed.
func (p *prestarter) retireHolder(h *netnsHolder) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		select {
		case <-time.After(holderGrace):
		case <-p.ctx.Done():
		}
		p.d.remove(context.Background(), h.id)
	}()
}
