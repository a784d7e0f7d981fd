package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// Deployment notes: the egress network.
//
// The worker creates (or reuses) an internal Docker bridge network
// (docker network create --internal) per runner, named by NetworkName, and
// runs the proxy in its own process, listening on the network's gateway
// address: on a bridge network that address belongs to an interface of the
// engine's host (the bridge), also for an internal network, so a worker
// running on that host can listen there and containers on the network
// reach it, while nothing on the network has a route anywhere else.
// Agent containers join the network and get HTTPS_PROXY pointing at the
// proxy (sandbox.DockerOptions.EgressNetwork and EgressProxy).
//
// A worker in a container (compose) is not on the engine's host: the
// gateway address is not one of its own. Attach the worker's container to
// the egress network (docker network connect NETWORK CONTAINER, or list
// the network under the worker service in compose, declared with
// "internal: true" and named with --egress-network); the proxy then
// listens on the worker container's address on that network, which agent
// containers reach just as well. StartGateway picks that address by
// itself, and fails with this advice when there is none.
//
// The host is reachable. An internal network only stops forwarding: a
// container on it still reaches every address of the engine's host (the
// kernel delivers those locally), so any service the host runs on all its
// addresses (0.0.0.0) is reachable from agent containers, not only the
// proxy. Bind host services to the addresses they are meant for, or drop
// the traffic in the host's firewall, e.g. with
//
//	iptables -I INPUT -i sup-eg-+ -p tcp ! --dport 3128 -j REJECT
//	iptables -I INPUT -i sup-eg-+ -p udp -j REJECT
//
// (the bridges of networks StartGateway creates are named sup-eg-<hash>).

// Labels of the networks StartGateway creates.
const (
	// LabelEgress marks an egress network ("1").
	LabelEgress = "supervisor.egress"
	// labelHost matches sandbox.LabelHost: the runner a container or
	// network belongs to.
	labelHost = "supervisor.host"
	// labelSandbox matches sandbox.LabelSandbox.
	labelSandbox = "supervisor.sandbox"
	// bridgeNamePrefix names the Linux bridges of created networks (an
	// interface name has at most 15 characters).
	bridgeNamePrefix = "sup-eg-"
)

// NetworkName is the default egress network of the runner host: stable
// across restarts, distinct between runners.
func NetworkName(host string) string {
	return "supervisor-egress-" + shortHash(host, 12)
}

func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// NetworkInfo describes an egress network.
type NetworkInfo struct {
	Name    string
	ID      string
	Gateway net.IP
	Subnet  *net.IPNet
}

// EnsureNetwork returns the internal network name, creating it if it does
// not exist (labelled as the egress network of host). An existing network
// that is not internal is refused: containers on it would bypass the
// proxy.
func EnsureNetwork(ctx context.Context, cli *client.Client, name, host string) (NetworkInfo, error) {
	nw, err := cli.NetworkInspect(ctx, name, network.InspectOptions{})
	if cerrdefs.IsNotFound(err) {
		_, cerr := cli.NetworkCreate(ctx, name, network.CreateOptions{
			Driver:   "bridge",
			Internal: true,
			Labels:   map[string]string{LabelEgress: "1", labelHost: host},
			Options:  map[string]string{"com.docker.network.bridge.name": bridgeNamePrefix + shortHash(name, 8)},
		})
		if cerr != nil && !cerrdefs.IsConflict(cerr) {
			return NetworkInfo{}, fmt.Errorf("egress: create internal network %s: %w", name, cerr)
		}
		nw, err = cli.NetworkInspect(ctx, name, network.InspectOptions{})
	}
	if err != nil {
		return NetworkInfo{}, fmt.Errorf("egress: inspect network %s: %w", name, err)
	}
	if !nw.Internal {
		return NetworkInfo{}, fmt.Errorf("egress: network %s exists but is not internal (containers on it would bypass the allow-list): remove it, or name an internal one", name)
	}
	info := NetworkInfo{Name: name, ID: nw.ID}
	for _, c := range nw.IPAM.Config {
		_, subnet, err := net.ParseCIDR(c.Subnet)
		if err != nil || subnet.IP.To4() == nil {
			continue
		}
		info.Subnet = subnet
		if gw := net.ParseIP(c.Gateway); gw != nil && gw.To4() != nil {
			info.Gateway = gw.To4()
		} else {
			// Older engines leave Gateway empty: it is the first address.
			gw := append(net.IP(nil), subnet.IP.To4()...)
			gw[3]++
			info.Gateway = gw
		}
		break
	}
	if info.Subnet == nil {
		return NetworkInfo{}, fmt.Errorf("egress: network %s has no IPv4 subnet", name)
	}
	return info, nil
}

// ListenIP returns the address of this machine the proxy should listen on
// for containers on the network: the gateway when it is one of this
// machine's addresses (a runner on the engine's host), otherwise this
// machine's address inside the network's subnet (a runner in a container
// attached to the network).
func ListenIP(info NetworkInfo) (net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("egress: local addresses: %w", err)
	}
	var inSubnet net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ipn.IP.Equal(info.Gateway) {
			return info.Gateway, nil
		}
		if inSubnet == nil && info.Subnet.Contains(ipn.IP) {
			inSubnet = ipn.IP.To4()
		}
	}
	if inSubnet != nil {
		return inSubnet, nil
	}
	return nil, fmt.Errorf("egress: neither the gateway %s of network %s nor any address in %s belongs to this machine: "+
		"a runner in a container must be attached to the network (docker network connect %s CONTAINER)",
		info.Gateway, info.Name, info.Subnet, info.Name)
}

// GatewayOptions configures StartGateway.
type GatewayOptions struct {
	// Client talks to the engine the sandbox uses.
	Client *client.Client
	// Network is the internal network's name ("" = NetworkName(Host)).
	Network string
	// Host is the runner's identity (sandbox.DockerOptions.Host): the
	// network's label, and how the proxy finds the job behind a client.
	Host string
	// Port is the proxy's port (0 = any free port).
	Port int
	// Proxy configures the proxy. If its Identify is nil, clients are
	// identified as the sandbox container with that address on the
	// network (its supervisor.job label, else workflow/node/attempt).
	Proxy Options
}

// Gateway is a running egress proxy on an internal network.
type Gateway struct {
	// Network is the internal network agent containers join.
	Network NetworkInfo
	// URL is the proxy's URL as containers on the network reach it
	// ("http://IP:PORT").
	URL   string
	proxy *Proxy
	ln    net.Listener
	done  chan error
}

// StartGateway ensures the internal network, listens on the address
// containers on it reach this machine by (see ListenIP) and serves the
// proxy there until Close.
func StartGateway(ctx context.Context, opts GatewayOptions) (*Gateway, error) {
	if opts.Client == nil {
		return nil, errors.New("egress: no Docker client")
	}
	name := opts.Network
	if name == "" {
		name = NetworkName(opts.Host)
	}
	info, err := EnsureNetwork(ctx, opts.Client, name, opts.Host)
	if err != nil {
		return nil, err
	}
	ip, err := ListenIP(info)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort(ip.String(), strconv.Itoa(opts.Port)))
	if err != nil {
		return nil, fmt.Errorf("egress: listen on network %s: %w", name, err)
	}
	popts := opts.Proxy
	if popts.Identify == nil {
		popts.Identify = newContainerIdentifier(opts.Client, name, opts.Host).identify
	}
	p, err := New(popts)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	g := &Gateway{Network: info, URL: "http://" + ln.Addr().String(), proxy: p, ln: ln, done: make(chan error, 1)}
	go func() { g.done <- p.Serve(ln) }()
	return g, nil
}

// Allowed returns the proxy's allow-list.
func (g *Gateway) Allowed() []string { return g.proxy.Allowed() }

// Close stops the proxy and closes its tunnels. The network is kept, for
// the runner's next start.
func (g *Gateway) Close() error {
	err := g.proxy.Close()
	_ = g.ln.Close()
	if serr := <-g.done; serr != nil && !errors.Is(serr, net.ErrClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// containerIdentifier finds the job behind a client address from the
// engine, caching answers briefly (addresses are reused once a container
// is gone).
type containerIdentifier struct {
	cli     *client.Client
	network string
	host    string

	mu    sync.Mutex
	cache map[string]idEntry
}

type idEntry struct {
	job string
	at  time.Time
}

const idCacheTTL = 2 * time.Second

func newContainerIdentifier(cli *client.Client, network, host string) *containerIdentifier {
	return &containerIdentifier{cli: cli, network: network, host: host, cache: map[string]idEntry{}}
}

func (c *containerIdentifier) identify(remote string) string {
	ip, _, err := net.SplitHostPort(remote)
	if err != nil {
		return ""
	}
	now := time.Now()
	c.mu.Lock()
	if e, ok := c.cache[ip]; ok && now.Sub(e.at) < idCacheTTL {
		c.mu.Unlock()
		return e.job
	}
	for k, e := range c.cache {
		if now.Sub(e.at) >= idCacheTTL {
			delete(c.cache, k)
		}
	}
	c.mu.Unlock()

	// The engine's list can lag a container's start by a moment, and
	// the first connection of a command comes right after it: look again
	// before giving up (a miss is not cached).
	job := ""
	for attempt := 0; attempt < 4 && job == ""; attempt++ {
		if attempt > 0 {
			time.Sleep(250 * time.Millisecond)
		}
		job = c.lookup(ip)
	}
	if job == "" {
		return ""
	}
	c.mu.Lock()
	c.cache[ip] = idEntry{job: job, at: now}
	c.mu.Unlock()
	return job
}

// lookup asks the engine for the job of the sandbox container with
// address ip on the network ("" if none).
func (c *containerIdentifier) lookup(ip string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", labelSandbox+"=1"),
		filters.Arg("label", labelHost+"="+c.host),
		filters.Arg("network", c.network),
	)})
	if err != nil {
		return ""
	}
	for _, ct := range list {
		if ct.NetworkSettings == nil {
			continue
		}
		ep := ct.NetworkSettings.Networks[c.network]
		if ep == nil || ep.IPAddress != ip {
			continue
		}
		if job := jobOf(ct.Labels); job != "" {
			return job
		}
		if len(ct.Names) > 0 {
			return "container " + strings.TrimPrefix(ct.Names[0], "/")
		}
		return "container " + ct.ID[:min(12, len(ct.ID))]
	}
	return ""
}

// jobOf names a sandbox container's job from its labels.
func jobOf(labels map[string]string) string {
	if j := labels["supervisor.job"]; j != "" {
		return j
	}
	if wf, node := labels["supervisor.workflow"], labels["supervisor.node"]; wf != "" || node != "" {
		s := wf + "/" + node
		if a := labels["supervisor.attempt"]; a != "" {
			s += "/a" + a
		}
		return s
	}
	return ""
}
