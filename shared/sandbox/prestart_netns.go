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
// cost, where joining another container's namespace costs nothing of it.
// With DockerOptions.Prestart, the containers of a workspace's jobs that
// have no network join the namespace of a holder container of that
// workspace instead: it runs nothing but the helper, sleeping, with no
// network but its loopback, no capabilities, a read-only root and small
// limits. Only a run that is alone in its workspace uses it: a run that
// starts while another of the same workspace is going (a review gate's
// reviewers run side by side) gets a namespace of its own, so no two jobs
// ever share one at the same time. The runners' workspaces serve one job
// at a time, so a workspace's jobs follow each other, each in its own
// container whose processes are all dead before the next starts: the
// namespace (a loopback and nothing else, which a job without
// capabilities cannot configure) carries from one job to the next only
// what the kernel keeps of it: closed connections' TIME_WAIT entries and
// its counters. Two workspaces never share one. A holder serves for
// holderLife at most, then a new one replaces it; one no run used for
// prestartIdle is removed; its deadline label lets RemoveExpired remove
// one a dead runner left. The first run of a workspace does not wait for
// a holder: the container started ahead of the next run makes it.

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
	// holderPids bounds a holder's tasks: the helper's threads.
	holderPids = 32
)

// netnsHolder is a workspace's holder container.
type netnsHolder struct {
	id      string
	created time.Time
	used    time.Time
}

// withNetns returns host with the network namespace of the holder of
// spec's workspace in place of a namespace of its own, if host has no
// network and the holder is there or (with create) can be made; host itself
// otherwise (the container then gets its own namespace, as without
// holders). holder is the holder's id, "" for none.
func (p *prestarter) withNetns(ctx context.Context, spec Spec, cfg *container.Config, host *container.HostConfig, create bool) (
	_ *container.HostConfig, holder string) {
	if host.NetworkMode != "none" {
		return host, ""
	}
	id, err := p.holder(ctx, filepath.Clean(spec.Workspace), cfg.Image, create)
	if err != nil || id == "" {
		if err != nil {
			p.d.caches.log.Debug("sandbox: no network namespace holder; the container gets its own", "workspace", spec.Workspace, "err", err)
		}
		return host, ""
	}
	c := *host
	c.NetworkMode = container.NetworkMode("container:" + id)
	return &c, id
}

// holder returns the id of the running holder of workspace root, making
// one from image, if create is set, when it has none (or none that is
// running and young enough); "" if it has none and create is not set.
func (p *prestarter) holder(ctx context.Context, root, image string, create bool) (string, error) {
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
	if !create || p.closed {
		p.mu.Unlock()
		return "", nil
	}
	p.wg.Add(1) // Close waits for the holder being made
	p.mu.Unlock()
	defer p.wg.Done()

	id, err := p.createHolder(ctx, image)
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.d.remove(context.WithoutCancel(ctx), id)
		return "", nil
	}
	defer p.mu.Unlock()
	if other := p.holders[root]; other != nil {
		// Another run of the workspace made one meanwhile.
		p.retireHolder(other)
	}
	h = &netnsHolder{id: id, created: now, used: now}
	p.holders[root] = h
	p.expireHolder(root, h, prestartIdle)
	return id, nil
}

// dropHolder stops giving holder id of workspace root to new containers
// (a container could not join its namespace).
func (p *prestarter) dropHolder(root, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.holders[root]; h != nil && h.id == id && !p.closed {
		delete(p.holders, root)
		p.retireHolder(h)
	}
}

// expireHolder removes workspace root's holder h once no run has used it
// for prestartIdle, checking after wait. p.mu is held.
func (p *prestarter) expireHolder(root string, h *netnsHolder, wait time.Duration) {
	time.AfterFunc(wait, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed || p.holders[root] != h {
			return
		}
		if left := prestartIdle - time.Since(h.used); left > 0 {
			p.expireHolder(root, h, left)
			return
		}
		delete(p.holders, root)
		p.retireHolder(h)
	})
}

// createHolder creates and starts a holder container from image.
func (p *prestarter) createHolder(ctx context.Context, image string) (string, error) {
	d := p.d
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	noInit := false
	pids := int64(holderPids)
	c := &container.Config{
		User: "65534:65534", Image: image, Cmd: strslice.StrSlice{helperTarget, "hold"}, Entrypoint: strslice.StrSlice{},
		Labels: map[string]string{
			LabelSandbox: "1", LabelHost: d.host, LabelNetnsHolder: "1",
			LabelDeadline: strconv.FormatInt(time.Now().Add(holderLife+prestartIdle+2*holderGrace).Unix(), 10),
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
