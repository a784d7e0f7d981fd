package sandbox

import (
	"path/filepath"
	"slices"
	"time"

	"github.com/docker/docker/api/types/container"
)

// Containers waiting per workspace, and when they are started (PERF-80).
//
// A container's start costs the engine a few tenths of a second of CPU
// (runc, the shim, the storage driver's mounts). Started beside a run, as
// PERF-69 has it, that CPU is taken from the run's own command on a small
// host, and from the other runs going on. So a workspace may have several
// containers waiting (DockerOptions.PrestartDepth): a run that takes one
// while another still waits starts none, and the workspace is topped up
// once the sandbox has run nothing for refillQuiet (a node's gates follow
// each other within milliseconds; the next node's work comes after an
// agent's round). A run that takes the last one still starts the next
// beside it, so a sandbox that is never quiet behaves as with one. Every
// command still gets a container of its own, which nothing ran in before.

// DefaultPrestartDepth is how many containers started ahead a workspace
// may have waiting when DockerOptions.PrestartDepth is 0: a node's vet and
// test gates, dispatched one after the other, both find one.
const DefaultPrestartDepth = 2

// refillQuiet is how long the sandbox must have run nothing before the
// workspaces are topped up.
const refillQuiet = 250 * time.Millisecond

// refill is what a workspace's containers are started from when it is
// topped up: its last run's configuration.
type refill struct {
	spec    Spec
	cfg     *container.Config
	base    *container.HostConfig
	imageID string
	key     string
}

// setQueue sets root's idle containers (none: the entry goes). p.mu is
// held.
func (p *prestarter) setQueue(root string, q []*idleContainer) {
	if len(q) == 0 {
		delete(p.idle, root)
		return
	}
	p.idle[root] = q
}

// split returns, in a new slice each and in order, the containers of q
// for which out is false and those for which it is true.
func split(q []*idleContainer, out func(*idleContainer) bool) (kept, dropped []*idleContainer) {
	for _, c := range q {
		if out(c) {
			dropped = append(dropped, c)
		} else {
			kept = append(kept, c)
		}
	}
	return kept, dropped
}

// idleCount is how many containers wait, in all workspaces. p.mu is held.
func (p *prestarter) idleCount() int {
	n := 0
	for _, q := range p.idle {
		n += len(q)
	}
	return n
}

// trim takes out of p.idle the containers that waited too long and, while
// more than p.max wait, the oldest, and returns them for removal. p.mu is
// held.
func (p *prestarter) trim() []*idleContainer {
	var drop []*idleContainer
	for ws, q := range p.idle {
		kept, old := split(q, func(c *idleContainer) bool { return time.Since(c.created) >= prestartIdle })
		if len(old) > 0 {
			drop = append(drop, old...)
			p.setQueue(ws, kept)
		}
	}
	for p.idleCount() > p.max {
		oldest := ""
		for ws, q := range p.idle {
			if oldest == "" || q[0].created.Before(p.idle[oldest][0].created) {
				oldest = ws
			}
		}
		q := p.idle[oldest]
		drop = append(drop, q[0])
		p.setQueue(oldest, q[1:])
	}
	return drop
}

// begin counts a run under way: no workspace is topped up until it ends.
func (p *prestarter) begin() {
	p.mu.Lock()
	p.active++
	if p.quiet != nil {
		p.quiet.Stop()
		p.quiet = nil
	}
	p.mu.Unlock()
}

// end counts a run's end; the last one under way arms the top-up.
func (p *prestarter) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active--
	if p.active == 0 && len(p.refills) > 0 && !p.closed {
		p.armTopUp()
	}
}

// armTopUp has topUp run after refillQuiet. p.mu is held.
func (p *prestarter) armTopUp() {
	var t *time.Timer
	t = time.AfterFunc(refillQuiet, func() {
		p.mu.Lock()
		if p.quiet != t || p.active > 0 || p.closed {
			p.mu.Unlock()
			return
		}
		p.quiet = nil
		p.mu.Unlock()
		p.topUp()
	})
	p.quiet = t
}

// wantRefill has spec's workspace topped up to p.depth containers of key
// once the sandbox is quiet.
func (p *prestarter) wantRefill(spec Spec, cfg *container.Config, base *container.HostConfig, imageID, key string) {
	if p.depth < 2 {
		return
	}
	own := Spec{Workspace: spec.Workspace, Caches: slices.Clone(spec.Caches), Timeout: spec.Timeout}
	p.mu.Lock()
	p.refills[filepath.Clean(spec.Workspace)] = refill{spec: own, cfg: cfg, base: base, imageID: imageID, key: key}
	p.mu.Unlock()
}

// topUp starts, if no run is under way, the containers the workspaces
// asking for a refill lack, as long as fewer than p.max wait in all.
func (p *prestarter) topUp() {
	p.mu.Lock()
	if p.active > 0 || p.closed {
		p.mu.Unlock()
		return
	}
	reqs := p.refills
	p.refills = map[string]refill{}
	room := p.max - p.idleCount()
	var todo []refill
	for root, r := range reqs {
		have := 0
		for _, c := range p.idle[root] {
			if c.key == r.key {
				have++
			}
		}
		for ; have < p.depth && room > 0; have++ {
			todo = append(todo, r)
			room--
		}
	}
	p.mu.Unlock()
	for _, r := range todo {
		p.start(r.spec, r.cfg, r.base, r.imageID, r.key)
	}
}
