package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/strslice"
	"github.com/docker/docker/client"
)

// Deployment notes for the Docker sandbox.
//
// Fallback. NewDocker never fails for an absent engine; a runner calls
// Available and, on an error, uses the process sandbox and logs a loud
// warning (there is then no file system or network isolation).
//
// Images are never pulled (no registry may be reachable): the gate and
// agent images must be built or loaded on every runner host. A missing
// image is ErrEngine.
//
// User and permissions. Commands never run as root. By default (User "")
// the container runs as the uid:gid owning the workspace directory when
// that is not root: the usual case of a runner running as an unprivileged
// service user, whose workspaces the command can then write, and whose
// files the runner can then clean up, with no permission change at all.
// When the workspace belongs to root (a runner running as root, e.g. in a
// container), the command runs as 65534:65534 (nobody), and the runner
// first adds group/other write permission to the workspace tree except
// .git (file modes other than the executable bit are not tracked by git,
// and workspaces are disposable, so nothing is lost; .git stays as it is
// and is mounted read-only anyway). Files the command creates then belong
// to 65534, which root can still remove. Changing ownership instead was
// rejected: git refuses a repository owned by another user ("dubious
// ownership") when the runner later inspects the workspace. With a
// rootless engine or userns-remap, container uids are shifted on the host
// and neither choice can write the workspace: set User explicitly (for a
// rootless engine "0:0", which is the unprivileged host user).
//
// Runner in a container. A runner that runs in a container and drives the
// host's engine through a mounted /var/run/docker.sock must name
// bind-mount sources by their host paths. Mount the runner's data
// directory from the host and set SUPERVISOR_SANDBOX_HOST_DATA_DIR to its
// host path; PathMapsFromEnv turns that into DockerOptions.PathMaps. A
// wrong or missing mapping makes every run fail with ErrEngine ("bind
// source path does not exist").
//
// Agents and egress. An agent job (Spec.Network non-empty) joins
// DockerOptions.EgressNetwork, meant to be an internal network (docker
// network create --internal) whose only member with a way out is an
// HTTPS CONNECT proxy that enforces the allow-list (package egress,
// run by the worker); the proxy variables point the agent at it, and the
// supervisor.network label records the allow-list. Gates never get a
// network.
//
// Orphans. Every container carries supervisor.sandbox=1 and
// supervisor.host=<Host>; Run always removes its container, and a runner
// calls RemoveOrphans at start for containers a crashed predecessor left.
// Host must therefore be stable across restarts of one runner and unique
// among runners sharing an engine.

// Defaults of the Docker sandbox (SB-04, SBX-05).
const (
	// DefaultDockerMemory is the memory limit of a container (swap is
	// never added on top of it).
	DefaultDockerMemory = 2 << 30
	// DefaultDockerCPUs is the CPU limit of a container.
	DefaultDockerCPUs = 2.0
	// DefaultDockerPids is the pids limit of a container (fork bombs).
	DefaultDockerPids = 256
	// DefaultTmpfsSize is the size of the tmpfs mounted at /tmp.
	DefaultTmpfsSize = 1 << 30
	// DefaultSandboxUser is the uid:gid commands run as when the workspace
	// belongs to root (nobody:nogroup).
	DefaultSandboxUser = "65534:65534"
	// DefaultNoProxy is NO_PROXY for agent containers.
	DefaultNoProxy = "localhost,127.0.0.1,::1"

	// ContainerWorkspace is where the workspace appears in a container.
	ContainerWorkspace = "/workspace"

	// LabelSandbox marks every container the sandbox creates ("1").
	LabelSandbox = "supervisor.sandbox"
	// LabelHost names the runner that created a container; RemoveOrphans
	// selects on it.
	LabelHost = "supervisor.host"
	// LabelNetwork lists, comma-separated, the host:port pairs an agent
	// container was allowed to reach (Spec.Network), for the egress proxy
	// and for operators.
	LabelNetwork = "supervisor.network"
	// LabelDeadline is the Unix time (seconds) by which the runner that
	// created a container will have killed it for its timeout, with the
	// time to start it included. A container still there well after its
	// deadline lost its runner; RemoveExpired selects on it.
	LabelDeadline = "supervisor.deadline"

	// EnvHostDataDir is the one setting a runner that itself runs in a
	// container (with the host's Docker socket mounted) needs: the host
	// path of its data directory. See PathMap and PathMapsFromEnv.
	EnvHostDataDir = "SUPERVISOR_SANDBOX_HOST_DATA_DIR"

	// engineTimeout bounds each clean-up call to the engine, which runs
	// even when the run's context is already cancelled.
	engineTimeout = 30 * time.Second
	// startTimeout bounds starting a container (mounts, cgroups, init).
	startTimeout = 2 * time.Minute
	// oomSettleTries and oomSettleInterval bound the wait for the
	// engine's OOM event after an unexplained SIGKILL.
	oomSettleTries    = 10
	oomSettleInterval = 100 * time.Millisecond
	// maxPendingLine is how much of a line without a newline is held back
	// from Spec.Stdout/Spec.Stderr before it is passed on anyway.
	maxPendingLine = 64 << 10
)

// ErrEngine means the Docker engine failed or refused a request that has
// nothing to do with the command: the engine is unreachable, the image is
// not present on this host (images are never pulled), the egress network
// is missing or not configured, the engine lost track of a running
// container. It is an infrastructure error: running the job elsewhere or
// later may succeed. Unlike ErrStart and ErrInvalidSpec it can be returned
// after the command started (with whatever Result was collected so far).
var ErrEngine = errors.New("sandbox: docker engine error")

// PathMap translates a path as the runner sees it (Container) into the same
// path as the Docker engine's host sees it (Host). A runner that runs in a
// container and talks to the host's engine through a mounted socket must
// give bind-mount sources as host paths: with its data directory mounted
// from /var/lib/supervisor/data at /data, the mapping is
// {Container: "/data", Host: "/var/lib/supervisor/data"}.
type PathMap struct {
	Container string
	Host      string
}

// PathMapsFromEnv returns the path mapping for a runner whose data
// directory, as it sees it, is dataDir, from the SUPERVISOR_SANDBOX_HOST_DATA_DIR
// environment variable: the host path of that same directory. It returns
// nil when the variable is unset (the runner runs on the engine's host).
func PathMapsFromEnv(dataDir string) ([]PathMap, error) {
	host := os.Getenv(EnvHostDataDir)
	if host == "" {
		return nil, nil
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(host) {
		return nil, fmt.Errorf("sandbox: %s=%q is not an absolute path", EnvHostDataDir, host)
	}
	return []PathMap{{Container: abs, Host: filepath.Clean(host)}}, nil
}

// DockerOptions configures a Docker sandbox. Zero values mean the defaults.
type DockerOptions struct {
	// Image is used when Spec.Image is empty. It must be present on the
	// engine's host: the sandbox never pulls.
	Image string
	// Host identifies the runner in the supervisor.host label of every
	// container it creates; RemoveOrphans removes a runner's leftovers by
	// it, so it must be stable across restarts of one runner and distinct
	// between runners sharing an engine ("" = os.Hostname()).
	Host string
	// User is the "uid:gid" commands run as. Empty means automatic: the
	// owner of the workspace directory when that is not root (so the
	// command can write the workspace and what it creates belongs to the
	// runner); otherwise DefaultSandboxUser, and if the runner is root it
	// first makes the workspace (but not .git) group- and world-writable.
	// An explicit value is used as is, with no change to the workspace.
	User string
	// Path is PATH inside the container ("" = BasePath). Set it to match
	// the image, e.g. "/usr/local/go/bin:" + BasePath.
	Path string
	// Resources are the default limits (zero fields = DefaultDockerMemory,
	// DefaultDockerCPUs, DefaultDockerPids); Spec.Resources overrides them
	// field by field.
	Resources Resources
	// TmpfsSize is the size in bytes of the tmpfs at /tmp (0 = 1 GiB).
	TmpfsSize int64
	// EgressNetwork is the Docker network agent containers (Spec.Network
	// non-empty) join: an internal network whose only way out is an egress
	// proxy enforcing the allow-list. Without it, a Spec with a Network
	// fails with ErrEngine. Gate containers never join it.
	EgressNetwork string
	// EgressProxy is the proxy's URL (e.g. "http://egress-proxy:3128"), as
	// reachable from EgressNetwork. Agent containers get it as HTTPS_PROXY,
	// HTTP_PROXY, https_proxy and http_proxy (set after Spec.Env, so a job
	// cannot replace them), and NoProxy as NO_PROXY and no_proxy.
	EgressProxy string
	// NoProxy is NO_PROXY for agent containers ("" = DefaultNoProxy).
	NoProxy string
	// PathMaps translate bind-mount sources when the runner runs in a
	// container; the longest matching Container prefix wins, and paths
	// outside every mapping are used unchanged. See PathMapsFromEnv.
	PathMaps []PathMap
	// GPUs, when positive, requests that many GPUs of the NVIDIA driver
	// for every container (a device request with capability "gpu", as
	// docker run --gpus N); the engine's host needs the NVIDIA container
	// toolkit. Containers running at once share the same GPUs.
	GPUs int
	// Caches configure the caches of Spec.Caches (see cache.go): where
	// their trusted and throw-away layers live and the warm-up that fills
	// the trusted ones. Copies of the directories images name in their
	// LabelImageTrees live there too.
	Caches CacheOptions
	// ImageLayersOnly has every run read all of its image from the
	// image's layers: LabelImageTrees is ignored.
	ImageLayersOnly bool
	// Prestart has the sandbox start, once a run in a workspace ends, the
	// container of that workspace's next run, so that its command runs
	// in it instead of waiting for a container's start (see prestart.go).
	// Every command still gets a container of its own.
	Prestart bool
	// PrestartMax bounds the containers started ahead that wait for a job
	// at once (0: DefaultPrestartMax); the oldest goes first.
	PrestartMax int
	// PrestartDepth is how many containers started ahead a workspace may
	// have waiting (0: DefaultPrestartDepth); beyond the first, they are
	// started once the sandbox has run nothing for a moment (PERF-80).
	PrestartDepth int
	// Helper is the path of supervisor-sandbox-helper, the static binary
	// that prestarted containers run ("" = the file of that name beside
	// the running executable). Prestart needs it.
	Helper string
}

// Docker is the Sandbox that runs each command in a fresh container of the
// local Docker engine, removed afterwards. A gate container has no network,
// a read-only root file system, the workspace mounted read-write at
// /workspace with its .git read-only, a tmpfs /tmp, a non-root user, no
// capabilities, no-new-privileges, and memory, CPU and pids limits. A
// Docker is safe for concurrent use.
type Docker struct {
	cli       *client.Client
	image     string
	host      string
	user      string
	path      string
	resources Resources
	tmpfsSize int64
	network   string
	proxy     string
	noProxy   string
	maps      []PathMap
	gpus      int
	caches    *cacheStore
	trees     *treeStore
	pre       *prestarter // nil without DockerOptions.Prestart
	// hosts is the /etc/hosts of containers with no network ("" = none:
	// they get the engine's network set-up, see docker_netns.go).
	hosts string

	infoOnce sync.Once
	ncpu     int // CPUs of the engine's host, 0 if unknown
	root     rootMode
	// reports counts the runs that ended on their helper's report
	// (PERF-75), for tests.
	reports atomic.Int64
}

var _ Sandbox = (*Docker)(nil)

// NewDocker returns a Docker sandbox talking to the engine named by the
// environment (DOCKER_HOST, DOCKER_API_VERSION, DOCKER_CERT_PATH,
// DOCKER_TLS_VERIFY; the local socket by default), negotiating the API
// version. It does not require the engine to be up: call Available to find
// out, and fall back to the process sandbox with a loud warning if not.
func NewDocker(ctx context.Context, opts DockerOptions) (*Docker, error) {
	d := &Docker{
		image:     opts.Image,
		host:      opts.Host,
		user:      opts.User,
		path:      opts.Path,
		resources: opts.Resources,
		tmpfsSize: opts.TmpfsSize,
		network:   opts.EgressNetwork,
		proxy:     opts.EgressProxy,
		noProxy:   opts.NoProxy,
		gpus:      opts.GPUs,
	}
	if d.host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("sandbox: host name: %w", err)
		}
		d.host = h
	}
	if d.path == "" {
		d.path = BasePath
	}
	r := &d.resources
	if r.MemoryBytes < 0 || r.CPUs < 0 || r.Pids < 0 || d.tmpfsSize < 0 {
		return nil, errors.New("sandbox: negative docker resource limit")
	}
	if r.MemoryBytes == 0 {
		r.MemoryBytes = DefaultDockerMemory
	}
	if r.CPUs == 0 {
		r.CPUs = DefaultDockerCPUs
	}
	if r.Pids == 0 {
		r.Pids = DefaultDockerPids
	}
	if d.tmpfsSize == 0 {
		d.tmpfsSize = DefaultTmpfsSize
	}
	if d.noProxy == "" {
		d.noProxy = DefaultNoProxy
	}
	if d.proxy != "" {
		u, err := url.Parse(d.proxy)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("sandbox: egress proxy %q is not an http(s) URL", d.proxy)
		}
		if d.network == "" {
			return nil, errors.New("sandbox: an egress proxy needs an egress network to reach it")
		}
	}
	if strings.ContainsAny(d.user, " \t\n") {
		return nil, fmt.Errorf("sandbox: invalid user %q", d.user)
	}
	for _, m := range opts.PathMaps {
		if !filepath.IsAbs(m.Container) || !filepath.IsAbs(m.Host) {
			return nil, fmt.Errorf("sandbox: path mapping %q → %q: both must be absolute", m.Container, m.Host)
		}
		d.maps = append(d.maps, PathMap{Container: filepath.Clean(m.Container), Host: filepath.Clean(m.Host)})
	}
	caches, err := newCacheStore(opts.Caches)
	if err != nil {
		return nil, err
	}
	d.caches = caches
	treeDir := caches.dir
	if opts.ImageLayersOnly {
		treeDir = ""
	}
	if d.trees, err = newTreeStore(treeDir, caches.log); err != nil {
		return nil, err
	}
	if caches.dir != "" {
		if d.hosts, err = writeHosts(caches.dir); err != nil {
			return nil, err
		}
	}
	if opts.Prestart {
		if d.pre, err = newPrestarter(d, opts.Helper, opts.PrestartMax, opts.PrestartDepth); err != nil {
			return nil, err
		}
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEngine, err)
	}
	cli.NegotiateAPIVersion(ctx) // best effort; retried on the first request
	d.cli = cli
	return d, nil
}

// Name returns "docker".
func (d *Docker) Name() string { return "docker" }

// Client returns the engine client (for tests and diagnostics).
func (d *Docker) Client() *client.Client { return d.cli }

// Resources returns the default limits of a container, defaults applied.
func (d *Docker) Resources() Resources { return d.resources }

// Close removes the containers started ahead of their jobs, stops a cache
// warm-up or a copy of an image's directories still running (its
// container is removed and nothing it wrote is kept), waits for them,
// then releases the engine client.
func (d *Docker) Close() error {
	if d.pre != nil {
		d.pre.close()
	}
	if d.caches != nil {
		d.caches.stop()
	}
	if d.trees != nil {
		d.trees.running.Wait()
	}
	return d.cli.Close()
}

// Available reports whether the engine answers; the error wraps ErrEngine.
func (d *Docker) Available(ctx context.Context) error {
	if _, err := d.cli.Ping(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrEngine, err)
	}
	return nil
}

// ImageDigest returns the ID of image ("sha256:…", the digest of its
// configuration) as the engine on this host has it, or of the default
// image if image is empty. The gate cache keys on it: a rebuilt image gets
// a new ID. It is looked up on every call, never cached.
func (d *Docker) ImageDigest(ctx context.Context, image string) (string, error) {
	if image == "" {
		image = d.image
	}
	if image == "" {
		return "", fmt.Errorf("%w: no image given and no default image", ErrInvalidSpec)
	}
	info, err := d.cli.ImageInspect(ctx, image)
	if err != nil {
		return "", fmt.Errorf("%w: image %q: %w", ErrEngine, image, err)
	}
	return info.ID, nil
}

// RemoveOrphans force-removes every container labelled as created by the
// sandbox for host ("" = this sandbox's Host option), running or not, and
// returns how many it removed. A runner calls it at start, to clean up
// after a previous instance that died mid-run.
func (d *Docker) RemoveOrphans(ctx context.Context, host string) (int, error) {
	if host == "" {
		host = d.host
	}
	list, err := d.cli.ContainerList(ctx, container.ListOptions{
		All: true,
		Filters: filters.NewArgs(
			filters.Arg("label", LabelSandbox+"=1"),
			filters.Arg("label", LabelHost+"="+host),
		),
	})
	if err != nil {
		return 0, fmt.Errorf("%w: listing containers: %w", ErrEngine, err)
	}
	removed := 0
	var errs []error
	for _, c := range list {
		err := d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil:
			removed++
		case cerrdefs.IsNotFound(err):
		default:
			errs = append(errs, fmt.Errorf("%w: removing container %.12s: %w", ErrEngine, c.ID, err))
		}
	}
	return removed, errors.Join(errs...)
}

// Expired is a container RemoveExpired removed.
type Expired struct {
	ID       string
	Host     string    // the runner that created it (LabelHost)
	Deadline time.Time // when its runner would have killed it
}

// RemoveExpired removes the containers of every runner on this engine that
// are still there grace after their deadline (LabelDeadline). A runner
// kills and removes its containers at their timeout, so such a container
// outlived its runner (killed, or gone for good with a host id that will
// not come back to RemoveOrphans) and would otherwise run, or lie
// exited, forever. Containers without a deadline are left alone. Labels
// ("key" or "key=value") narrow the sweep to containers carrying them all.
func (d *Docker) RemoveExpired(ctx context.Context, grace time.Duration, labels ...string) ([]Expired, error) {
	args := filters.NewArgs(filters.Arg("label", LabelSandbox+"=1"), filters.Arg("label", LabelDeadline))
	for _, l := range labels {
		args.Add("label", l)
	}
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, fmt.Errorf("%w: listing containers: %w", ErrEngine, err)
	}
	now := time.Now()
	var removed []Expired
	var errs []error
	for _, c := range list {
		sec, err := strconv.ParseInt(c.Labels[LabelDeadline], 10, 64)
		if err != nil {
			continue // not ours to judge
		}
		deadline := time.Unix(sec, 0)
		if now.Before(deadline.Add(grace)) {
			continue
		}
		err = d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil:
			removed = append(removed, Expired{ID: c.ID, Host: c.Labels[LabelHost], Deadline: deadline})
		case cerrdefs.IsNotFound(err):
		default:
			errs = append(errs, fmt.Errorf("%w: removing expired container %.12s: %w", ErrEngine, c.ID, err))
		}
	}
	return removed, errors.Join(errs...)
}

// HostPath translates a path as the runner sees it into the engine host's
// path, through the PathMaps (the longest matching prefix wins).
func (d *Docker) HostPath(p string) string {
	p = filepath.Clean(p)
	best := -1
	for i, m := range d.maps {
		if pathWithin(p, m.Container) && (best < 0 || len(m.Container) > len(d.maps[best].Container)) {
			best = i
		}
	}
	if best < 0 {
		return p
	}
	rel, err := filepath.Rel(d.maps[best].Container, p)
	if err != nil {
		return p
	}
	return filepath.Join(d.maps[best].Host, rel)
}

// pathWithin reports whether p is dir or below it (both clean).
func pathWithin(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Run runs spec.Argv (as the container's command: the image's entrypoint
// is cleared and no shell is added; Argv[0] is looked up in the container's
// PATH) in a new container and waits for it to end; the container is
// removed afterwards in every case.
//
// The environment is the same minimal base as the process sandbox's, with
// container paths (PATH as configured, HOME=/tmp, TMPDIR=/tmp,
// LANG=C.UTF-8, TERM=dumb, USER=supervisor), then spec.Env minus PATH,
// HOME, USER, PYTHONPATH and LD_*. Nothing comes from the runner's own
// environment. Variables set by the image itself (ENV) are kept unless
// replaced, and the engine adds HOSTNAME.
//
// With spec.Network empty the container has no network at all: a network
// namespace of its own with nothing but its loopback interface, and an
// /etc/hosts that names it (see docker_netns.go). Otherwise
// it joins the egress network and gets the proxy variables; the allow-list
// is enforced by the proxy, not here, and recorded in the
// supervisor.network label.
//
// When spec.Timeout passes or ctx is cancelled, the container's init gets
// SIGTERM (passed on to the command) and, KillGrace later, the whole
// container SIGKILL; the Result then has ExitCode -1, the signal that
// ended the command if known, and TimedOut set for the timeout. A command
// that ends by itself with a signal is reported the way the container's
// init reports it, as exit status 128+signal. When the kernel killed a
// process for exceeding the memory limit, OOMKilled is set (and ExitCode
// is -1 with Signal SIGKILL if that ended the command).
//
// Stdout and stderr are kept as tails like the process sandbox's, and
// passed to spec.Stdout/spec.Stderr as they arrive, in whole lines (a line
// longer than 64 KiB is passed on in pieces, an unterminated last line at
// the end).
//
// With DockerOptions.Prestart, a run may instead take a container started
// ahead of it for its workspace and run the command in it (see
// prestart.go): the same environment, mounts and limits, and the same
// Result, except that the command is the child of our helper rather than
// of the container's init, and that the container does not carry
// spec.Labels (RunLabels gives them).
//
// Errors: ErrInvalidSpec (nothing created), ErrStart (the command is not
// found or not executable in the image, as the engine, the container's
// init or the helper of a container started ahead reports it; the
// container is removed), ErrEngine (see there), or the
// context's error if ctx ended before the start.
func (d *Docker) Run(ctx context.Context, spec Spec) (Result, error) {
	return d.runSpec(ctx, spec, nil)
}

// runSpec is Run; warm, for a warm-up run, names the host directory each
// cache of the spec is mounted from, writable.
func (d *Docker) runSpec(ctx context.Context, spec Spec, warm map[string]string) (Result, error) {
	if err := validateSpec(spec); err != nil {
		return Result{}, err
	}
	dir, err := resolveWorkDir(spec.Workspace, spec.WorkingDir)
	if err != nil {
		return Result{}, err
	}
	cfg, hostCfg, fixPerms, err := d.containerConfig(spec, dir)
	if err != nil {
		return Result{}, err
	}
	// The engine refuses a CPU limit above the number of CPUs it has.
	if n := d.engineCPUs(ctx); n > 0 && hostCfg.NanoCPUs > int64(n)*1e9 {
		hostCfg.NanoCPUs = int64(n) * 1e9
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("sandbox: not started: %w", err)
	}
	imageID, trees, err := d.treeMounts(ctx, cfg.Image)
	if err != nil {
		return Result{}, err
	}
	hostCfg.Mounts = append(hostCfg.Mounts, trees...)
	if d.pre != nil && warm == nil {
		return d.pre.run(ctx, spec, cfg, hostCfg, imageID, fixPerms)
	}
	caches, err := d.addCaches(ctx, spec, cfg, hostCfg, warm, imageID)
	if err != nil {
		return Result{}, err
	}
	defer caches.cleanup()
	if fixPerms {
		if err := MakeWritable(filepath.Clean(spec.Workspace)); err != nil {
			return Result{}, fmt.Errorf("%w: making the workspace writable for %s: %w", ErrStart, cfg.User, err)
		}
	}
	return d.run(ctx, spec, cfg, hostCfg)
}

// engineCPUs returns the number of CPUs of the engine's host (0 if the
// engine did not say).
func (d *Docker) engineCPUs(ctx context.Context) int {
	d.engineInfo(ctx)
	return d.ncpu
}

// engineInfo asks the engine, once, for its host's CPUs and its storage
// driver.
func (d *Docker) engineInfo(ctx context.Context) {
	d.infoOnce.Do(func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
		defer cancel()
		if info, err := d.cli.Info(c); err == nil {
			d.ncpu = info.NCPU
			// Only an engine on this host, through its socket: the layer's
			// path is the engine's host's.
			local := strings.HasPrefix(d.cli.DaemonHost(), "unix://")
			d.root.enabled.Store(info.Driver == fuseOverlayDriver && local && filepath.IsAbs(info.DockerRootDir))
			d.root.layers = filepath.Join(info.DockerRootDir, fuseOverlayDriver)
		}
	})
}

// containerConfig builds the container's configuration for spec, whose
// working directory resolves to dir on the runner. fixPerms reports that
// the workspace must be made writable for the container's user first.
func (d *Docker) containerConfig(spec Spec, dir string) (*container.Config, *container.HostConfig, bool, error) {
	image := spec.Image
	if image == "" {
		image = d.image
	}
	if image == "" {
		return nil, nil, false, fmt.Errorf("%w: no image given and no default image", ErrInvalidSpec)
	}
	if err := validateNetwork(spec.Network); err != nil {
		return nil, nil, false, err
	}
	if len(spec.Network) > 0 && d.network == "" {
		return nil, nil, false, fmt.Errorf("%w: the spec needs network access (%s) but no egress network is configured",
			ErrEngine, strings.Join(spec.Network, ", "))
	}
	res := d.resources
	sr := spec.Resources
	if sr.MemoryBytes < 0 || sr.CPUs < 0 || sr.Pids < 0 {
		return nil, nil, false, fmt.Errorf("%w: negative resource limit", ErrInvalidSpec)
	}
	if sr.MemoryBytes > 0 {
		res.MemoryBytes = sr.MemoryBytes
	}
	if sr.CPUs > 0 {
		res.CPUs = sr.CPUs
	}
	if sr.Pids > 0 {
		res.Pids = sr.Pids
	}

	root := filepath.Clean(spec.Workspace)
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: working directory: %w", ErrInvalidSpec, err)
	}
	workDir := path.Join(ContainerWorkspace, filepath.ToSlash(rel))

	mounts := []mount.Mount{{Type: mount.TypeBind, Source: d.HostPath(root), Target: ContainerWorkspace}}
	gitPath := filepath.Join(root, ".git")
	switch fi, err := os.Lstat(gitPath); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, nil, false, fmt.Errorf("%w: workspace .git: %w", ErrInvalidSpec, err)
	case fi.IsDir() || fi.Mode().IsRegular():
		mounts = append(mounts, mount.Mount{
			Type: mount.TypeBind, Source: d.HostPath(gitPath), Target: ContainerWorkspace + "/.git", ReadOnly: true,
		})
	default:
		// A symlink would be followed on the engine's host when mounting.
		return nil, nil, false, fmt.Errorf("%w: workspace .git is neither a directory nor a file (%v)", ErrInvalidSpec, fi.Mode().Type())
	}

	files, err := fileEnv(spec, ContainerFiles)
	if err != nil {
		return nil, nil, false, err
	}
	for i, f := range spec.Files {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: d.HostPath(f.HostPath),
			Target: files[spec.Files[i].Env], ReadOnly: true})
	}

	user, fixPerms := d.userFor(root)
	labels := map[string]string{}
	for k, v := range spec.Labels {
		if k == "" {
			continue
		}
		if !strings.ContainsAny(k, "./") {
			k = "supervisor." + k
		}
		labels[k] = v
	}
	labels[LabelSandbox] = "1"
	labels[LabelHost] = d.host
	if spec.Timeout > 0 {
		labels[LabelDeadline] = strconv.FormatInt(time.Now().Add(startTimeout+spec.Timeout).Unix(), 10)
	}
	networkMode := container.NetworkMode("none")
	if len(spec.Network) > 0 {
		labels[LabelNetwork] = strings.Join(spec.Network, ",")
		networkMode = container.NetworkMode(d.network)
	}

	stdin := spec.Stdin != nil
	cfg := &container.Config{
		User:         user,
		Env:          d.buildEnv(spec),
		Cmd:          strslice.StrSlice(spec.Argv),
		Entrypoint:   strslice.StrSlice{}, // non-nil and empty: clears the image's
		Image:        image,
		WorkingDir:   workDir,
		Labels:       labels,
		AttachStdout: true,
		AttachStderr: true,
		AttachStdin:  stdin,
		OpenStdin:    stdin,
		StdinOnce:    stdin,
	}
	pids := res.Pids
	init := true
	hostCfg := &container.HostConfig{
		NetworkMode:    networkMode,
		Mounts:         mounts,
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			// exec: go test, for one, runs the binaries it builds in TMPDIR.
			"/tmp": fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", d.tmpfsSize),
		},
		CapDrop:     strslice.StrSlice{"ALL"},
		SecurityOpt: []string{"no-new-privileges"},
		IpcMode:     container.IPCModePrivate,
		// Output is read through the attach stream; keep no log on disk.
		LogConfig: container.LogConfig{Type: "none"},
		// An init as PID 1 passes SIGTERM on to the command and reaps
		// zombies left by test suites.
		Init: &init,
		Resources: container.Resources{
			Memory:     res.MemoryBytes,
			MemorySwap: res.MemoryBytes, // no swap beyond the memory limit
			NanoCPUs:   int64(res.CPUs * 1e9),
			PidsLimit:  &pids,
		},
	}
	if d.gpus > 0 {
		hostCfg.Resources.DeviceRequests = []container.DeviceRequest{{
			Driver: "nvidia", Count: d.gpus, Capabilities: [][]string{{"gpu"}},
		}}
	}
	return cfg, hostCfg, fixPerms, nil
}

// validateNetwork checks that every entry is host:port.
func validateNetwork(network []string) error {
	for _, hp := range network {
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" || strings.ContainsAny(hp, ", \t\n") {
			return fmt.Errorf("%w: network entry %q is not host:port", ErrInvalidSpec, hp)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: network entry %q has an invalid port", ErrInvalidSpec, hp)
		}
	}
	return nil
}

// userFor picks the container user for the workspace root: see
// DockerOptions.User.
// WritableWorkspaces reports whether runs make the workspace writable for
// their container's user (MakeWritable): a runner running as root without
// a configured user, whose workspaces belong to root.
func (d *Docker) WritableWorkspaces() bool { return d.user == "" && os.Geteuid() == 0 }

func (d *Docker) userFor(root string) (user string, fixPerms bool) {
	if d.user != "" {
		return d.user, false
	}
	if fi, err := os.Stat(root); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
			gid := st.Gid
			if gid == 0 {
				gid = 65534
			}
			return fmt.Sprintf("%d:%d", st.Uid, gid), false
		}
	}
	return DefaultSandboxUser, os.Geteuid() == 0
}

// MakeWritable adds group and other read/write permission (and search or
// execute permission where the owner has it) to the workspace and
// everything in it except .git and symlinks, so that DefaultSandboxUser
// (or a process sandbox's user) can work in a workspace that belongs to
// root. Git tracks only the executable bit, which this keeps as the owner
// has it. It changes nothing that already has those permissions.
func MakeWritable(root string) error {
	return filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == filepath.Join(root, ".git") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.Type()&fs.ModeSymlink != 0 || (!e.IsDir() && !e.Type().IsRegular()) {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode()
		want := mode | 0o066
		if e.IsDir() || mode&0o100 != 0 {
			want |= 0o011
		}
		if e.IsDir() {
			want |= 0o700
		}
		if want == mode {
			return nil
		}
		return os.Chmod(p, want)
	})
}

// buildEnv returns the container's environment, sorted by name.
func (d *Docker) buildEnv(spec Spec) []string {
	env := map[string]string{
		"PATH":   d.path,
		"HOME":   "/tmp",
		"TMPDIR": "/tmp",
		"LANG":   "C.UTF-8",
		"TERM":   "dumb",
		"USER":   "supervisor",
	}
	for k, v := range spec.Env {
		if !deniedEnv(k) {
			env[k] = v
		}
	}
	if spec.WorkspaceEnv != "" {
		env[spec.WorkspaceEnv] = ContainerWorkspace
	}
	files, _ := fileEnv(spec, ContainerFiles) // checked before the container was made
	for k, v := range files {
		env[k] = v
	}
	if len(spec.Network) > 0 && d.proxy != "" {
		for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
			env[k] = d.proxy
		}
		env["NO_PROXY"] = d.noProxy
		env["no_proxy"] = d.noProxy
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// containerExit is the outcome of waiting for a container, valid once done
// is closed.
type containerExit struct {
	done chan struct{}
	code int64
	err  error
}

func (e *containerExit) exited() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// run creates, attaches to, starts and supervises the container, and
// removes it.
func (d *Docker) run(ctx context.Context, spec Spec, cfg *container.Config, hostCfg *container.HostConfig) (Result, error) {
	// Clean-up must happen even when ctx is cancelled.
	bg := context.WithoutCancel(ctx)
	notStarted := func(what string, err error) (Result, error) {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("sandbox: not started: %w", ctx.Err())
		}
		return Result{}, fmt.Errorf("%w: %s: %w", ErrEngine, what, err)
	}

	// The attach below notices a cancellation during the create, and the
	// deferred removal cleans up.
	id, err := d.create(ctx, cfg, hostCfg)
	if err != nil {
		switch {
		case ctx.Err() != nil:
		case cerrdefs.IsNotFound(err):
			return Result{}, fmt.Errorf("%w: create container: %w (images are never pulled: build or load it on this host)", ErrEngine, err)
		case strings.Contains(err.Error(), "bind source path does not exist"):
			return Result{}, fmt.Errorf("%w: create container: %w (a runner in a container needs %s)", ErrEngine, err, EnvHostDataDir)
		case cerrdefs.IsInvalidArgument(err):
			return Result{}, fmt.Errorf("%w: create container: %w", ErrInvalidSpec, err)
		}
		return notStarted("create container", err)
	}
	defer d.remove(bg, id)

	hj, err := d.cli.ContainerAttach(ctx, id, container.AttachOptions{
		Stream: true, Stdin: spec.Stdin != nil, Stdout: true, Stderr: true,
	})
	if err != nil {
		return notStarted("attach to container", err)
	}
	defer hj.Close()

	exit, stopWait := d.waitExit(bg, id)
	defer stopWait()
	out := readStreams(spec, hj.Reader)

	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("sandbox: not started: %w", err)
	}
	// Once asked, the engine may start the command even if the request is
	// abandoned, so the start is not cancellable: a cancellation from now
	// on is handled below, like one during the run.
	startedAt := time.Now()
	sctx, cancelStart := context.WithTimeout(bg, startTimeout)
	err = d.cli.ContainerStart(sctx, id, container.StartOptions{})
	cancelStart()
	if err != nil {
		if cerrdefs.IsInvalidArgument(err) {
			return Result{}, fmt.Errorf("%w: %s: %w", ErrStart, spec.Argv[0], startError{err})
		}
		return Result{}, fmt.Errorf("%w: start container: %w", ErrEngine, startError{err})
	}
	if spec.Stdin != nil {
		go func() {
			_, _ = io.Copy(hj.Conn, spec.Stdin)
			_ = hj.CloseWrite()
		}()
	}
	return d.supervise(ctx, spec, id, cfg.Image, hj.Close, out, exit, nil, "", startedAt, func(stderr []byte) string {
		if m := initExecFailed.FindSubmatch(stderr); m != nil && string(m[1]) == spec.Argv[0] {
			return string(m[2])
		}
		return ""
	})
}

// startError is the engine's refusal to start a container: nothing of
// the command ran.
type startError struct{ err error }

func (e startError) Error() string { return e.err.Error() }
func (e startError) Unwrap() error { return e.err }

// waitExit starts waiting for the next exit of container id; the exit is
// reported once its done is closed. stop ends the wait.
func (d *Docker) waitExit(ctx context.Context, id string) (exit *containerExit, stop func()) {
	waitCtx, cancelWait := context.WithCancel(ctx)
	waitC, waitErrC := d.cli.ContainerWait(waitCtx, id, container.WaitConditionNextExit)
	exit = &containerExit{done: make(chan struct{})}
	go func() {
		defer close(exit.done)
		select {
		case w := <-waitC:
			exit.code = w.StatusCode
			if w.Error != nil && w.Error.Message != "" {
				exit.err = errors.New(w.Error.Message)
			}
		case err := <-waitErrC:
			exit.err = err
		}
	}()
	return exit, cancelWait
}

// supervise sees the command of container id (of image), started at
// startedAt, to its end: it terminates the container on spec's timeout or
// ctx's end, collects the output out (closeStream ends its stream), and
// reads the exit from the engine. startFailed returns why the command
// could not be started if its standard error says so (the command's
// status 126 or 127 and no standard output), else "".
func (d *Docker) supervise(ctx context.Context, spec Spec, id, image string, closeStream func(), out *streams,
	exit *containerExit, reported <-chan int, imageID string, startedAt time.Time, startFailed func(stderr []byte) string) (Result, error) {
	bg := context.WithoutCancel(ctx)
	grace, timeout, stopTimer := spec.limits()
	defer stopTimer()
	var res Result
	killed := false
	code, byHelper := 0, false
	// take takes the helper's report of the command's end (PERF-75) and
	// reports whether it did: a SIGKILL may be the kernel's OOM killer,
	// which the engine records, so its exit state is waited for then.
	take := func(c int) bool {
		if c == 128+int(syscall.SIGKILL) {
			reported = nil
			return false
		}
		code, byHelper = c, true
		return true
	}
	// ended takes a report that is already there.
	ended := func() bool {
		select {
		case c := <-reported:
			return take(c)
		default:
			return false
		}
	}
	for waiting := true; waiting; {
		waiting = false
		select {
		case <-exit.done:
		case c := <-reported:
			waiting = !take(c)
		case <-timeout:
			if ended() { // the command ended first
				break
			}
			res.TimedOut = !exit.exited()
			killed = res.TimedOut
			d.terminate(bg, id, grace, exit)
		case <-ctx.Done():
			if ended() {
				break
			}
			killed = !exit.exited()
			d.terminate(bg, id, grace, exit)
		}
	}
	res.Duration = time.Since(startedAt)
	res.StartedAt = startedAt
	if byHelper {
		// The helper reported the command's end once nothing of the job
		// ran and all its output was written (PERF-75): the container's
		// teardown is not the run's.
		d.reports.Add(1)
		out.finishNow(closeStream, &res)
		res.Environment = "docker " + image
		if imageID != "" {
			res.Environment += "@" + imageID
		}
		res.setEnd(code, false)
		return res, nil
	}

	// The attach stream ends when the container does.
	out.finish(closeStream, &res)

	res.ExitCode = -1
	if !exit.exited() {
		return res, fmt.Errorf("%w: container %.12s did not stop", ErrEngine, id)
	}
	if exit.err != nil {
		return res, fmt.Errorf("%w: waiting for container %.12s: %w", ErrEngine, id, exit.err)
	}
	code = int(exit.code)
	ictx, cancel := context.WithTimeout(bg, engineTimeout)
	info, err := d.cli.ContainerInspect(ictx, id)
	cancel()
	if err == nil && info.State != nil {
		res.OOMKilled = info.State.OOMKilled
		code = info.State.ExitCode
		// The command's own run time, from the engine: without the
		// container's start-up (~0.2 s) that the start request includes
		// (a container started ahead of its job started before the job
		// and keeps the sandbox's own measure).
		started, serr := time.Parse(time.RFC3339Nano, info.State.StartedAt)
		finished, ferr := time.Parse(time.RFC3339Nano, info.State.FinishedAt)
		if serr == nil && ferr == nil && finished.After(started) && finished.Sub(started) <= res.Duration {
			res.StartedAt, res.Duration = started, finished.Sub(started)
		}
	}
	// A SIGKILL nobody here sent is most likely the kernel's OOM killer,
	// but the engine records that from an event that can arrive after the
	// exit: give it a moment before concluding it was something else.
	for i := 0; err == nil && !killed && !res.OOMKilled && code == 128+int(syscall.SIGKILL) && i < oomSettleTries; i++ {
		time.Sleep(oomSettleInterval)
		ictx, cancel := context.WithTimeout(bg, engineTimeout)
		info, err = d.cli.ContainerInspect(ictx, id)
		cancel()
		if err == nil && info.State != nil {
			res.OOMKilled = info.State.OOMKilled
		}
	}
	res.Environment = "docker " + image
	if err == nil && info.Image != "" {
		res.Environment += "@" + info.Image
	}
	if !killed && (code == 126 || code == 127) && len(res.Stdout) == 0 {
		if m := startFailed(res.Stderr); m != "" {
			return Result{}, fmt.Errorf("%w: %s: %s", ErrStart, spec.Argv[0], m)
		}
	}
	res.setEnd(code, killed)
	return res, nil
}

// initExecFailed matches what the container's init (tini) writes, as the
// only output of the run, when it cannot execute the command (exit status
// 127 when not found, 126 when not executable).
var initExecFailed = regexp.MustCompile(`^\[FATAL tini \(\d+\)\] exec (.*) failed: (.*)\n$`)

// terminate sends SIGTERM to the container's init and, if the container
// has not exited after grace, SIGKILL to all of it; it returns once the
// container has exited or the engine stopped answering.
func (d *Docker) terminate(ctx context.Context, id string, grace time.Duration, exit *containerExit) {
	if exit.exited() {
		return
	}
	kill := func(sig string) {
		c, cancel := context.WithTimeout(ctx, engineTimeout)
		defer cancel()
		_ = d.cli.ContainerKill(c, id, sig) // fails if it has just exited
	}
	kill("SIGTERM")
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exit.done:
		return
	case <-t.C:
	}
	kill("SIGKILL")
	select {
	case <-exit.done:
	case <-time.After(engineTimeout):
	}
}

// create creates a sandbox container and returns its id. Once asked, the
// engine may create the container even if the request is abandoned, and a
// removal sent meanwhile would find nothing: so the create is not
// cancelled with ctx (the caller looks at ctx once it has returned), and a
// create that failed, a timed-out one that may still have been carried out
// among them, has its container removed by name.
func (d *Docker) create(ctx context.Context, cfg *container.Config, hostCfg *container.HostConfig) (string, error) {
	bg := context.WithoutCancel(ctx)
	d.withoutNetwork(cfg, hostCfg)
	name := "supervisor-sbx-" + randomHex(8)
	cctx, cancel := context.WithTimeout(bg, engineTimeout)
	created, err := d.cli.ContainerCreate(cctx, cfg, hostCfg, nil, nil, name)
	cancel()
	if err != nil {
		d.remove(bg, name)
		return "", err
	}
	d.adjustRoot(bg, created.ID, cfg, hostCfg)
	return created.ID, nil
}

// remove force-removes a container, retrying a little; a container it
// cannot remove is left to RemoveOrphans.
func (d *Docker) remove(ctx context.Context, id string) {
	for attempt := 0; attempt < 3; attempt++ {
		c, cancel := context.WithTimeout(ctx, engineTimeout)
		err := d.cli.ContainerRemove(c, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		cancel()
		if err == nil || cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
			// Conflict: a removal is already in progress.
			return
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
}

// randomHex returns 2n random hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lineWriter feeds a TailBuffer with everything and, until it fails, an
// optional sink with whole lines only, so that lines of stdout and stderr
// sharing one sink never interleave mid-line. Writes come from a single
// goroutine (stdcopy); mu serializes the sink with the other stream's.
type lineWriter struct {
	tail    *TailBuffer
	sink    io.Writer
	mu      *sync.Mutex
	pending []byte
	sinkErr error
}

func (w *lineWriter) Write(p []byte) (int, error) {
	_, _ = w.tail.Write(p)
	if w.sink == nil || w.sinkErr != nil {
		return len(p), nil
	}
	w.pending = append(w.pending, p...)
	n := bytes.LastIndexByte(w.pending, '\n') + 1
	if n == 0 && len(w.pending) >= maxPendingLine {
		n = len(w.pending)
	}
	if n > 0 {
		w.emit(w.pending[:n])
		w.pending = append(w.pending[:0], w.pending[n:]...)
	}
	return len(p), nil
}

// flush passes on an unterminated last line.
func (w *lineWriter) flush() {
	if w.sink != nil && w.sinkErr == nil && len(w.pending) > 0 {
		w.emit(w.pending)
	}
	w.pending = nil
}

func (w *lineWriter) emit(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, w.sinkErr = w.sink.Write(b)
}
