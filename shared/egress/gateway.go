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
// The host is not reachable. An internal network only stops forwarding: a
// container on it still reaches every address of the engine's host (the
// kernel delivers those locally), so StartGateway closes that path:
//
//   - A runner on the engine's host (the proxy on the gateway) installs
//     host firewall rules for the network's bridge: TCP to the proxy's
//     address and port is accepted, everything else arriving on the
//     bridge rejected (firewall.go); Close removes them. This needs root
//     (CAP_NET_ADMIN) and iptables/ip6tables on the host; without them
//     StartGateway fails rather than leave the host open.
//   - A runner in a container (the proxy on its address in the subnet)
//     needs no rule: the network must be created with the bridge option
//     com.docker.network.bridge.inhibit_ipv4=true, which leaves the host
//     no address on the bridge, so containers on it reach the subnet only
//     (compose.docker-sandbox.yaml declares it so). StartGateway refuses
//     a network without it.
//
// Either way the engine's own rules drop traffic between the network and
// containers on other networks.

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
	// Bridge is the network's Linux bridge on the engine's host.
	Bridge string
	// Hostless is true when the host has no IPv4 address on the bridge
	// (the option com.docker.network.bridge.inhibit_ipv4).
	Hostless bool
}

// optInhibitIPv4 is the bridge option that leaves the host no address on
// a network's bridge.
const optInhibitIPv4 = "com.docker.network.bridge.inhibit_ipv4"

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
	hostless, _ := strconv.ParseBool(nw.Options[optInhibitIPv4])
	info := NetworkInfo{Name: name, ID: nw.ID, Bridge: bridgeName(nw.Options, nw.ID), Hostless: hostless}
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
	// RunLabels, if set, gives the labels of the job running in a
	// container that does not carry them itself (one the sandbox started
	// ahead of its job: sandbox.Docker.RunLabels); nil if none.
	RunLabels func(containerID string) map[string]string
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
	fw    *hostFirewall // nil when the bridge has no host address
	done  chan error
}

// StartGateway ensures the internal network, listens on the address
// containers on it reach this machine by (see ListenIP) and serves the
// proxy there until Close. It makes sure the proxy is all of the engine's
// host that containers on the network reach: on the gateway it installs
// the host firewall rules (and fails if it cannot); inside the subnet it
// requires a network whose bridge has no host address.
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
	onGateway, err := needsFirewall(info, ip)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort(ip.String(), strconv.Itoa(opts.Port)))
	if err != nil {
		return nil, fmt.Errorf("egress: listen on network %s: %w", name, err)
	}
	var fw *hostFirewall
	if onGateway {
		port := ln.Addr().(*net.TCPAddr).Port
		if fw, err = installFirewall(ctx, info.Bridge, ip, port); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("egress: closing the engine's host to containers on network %s "+
				"(the runner needs root or CAP_NET_ADMIN on the host and iptables/ip6tables; "+
				"or run it in a container attached to a network with %s=true): %w", name, optInhibitIPv4, err)
		}
	}
	popts := opts.Proxy
	if popts.Identify == nil {
		ci := newContainerIdentifier(opts.Client, name, opts.Host)
		ci.runLabels = opts.RunLabels
		popts.Identify = ci.identify
	}
	p, err := New(popts)
	if err != nil {
		_ = ln.Close()
		if fw != nil {
			_ = fw.remove(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	g := &Gateway{Network: info, URL: "http://" + ln.Addr().String(), proxy: p, ln: ln, fw: fw, done: make(chan error, 1)}
	go func() { g.done <- p.Serve(ln) }()
	return g, nil
}

// needsFirewall tells how the host is kept from containers on the network
// when the proxy listens on ip: true when ip is the gateway (the host
// firewall must close the host's other ports); false, or an error, when
// ip is an address inside the subnet, which is safe only if the bridge
// has no host address.
func needsFirewall(info NetworkInfo, ip net.IP) (bool, error) {
	if ip.Equal(info.Gateway) {
		return true, nil
	}
	if !info.Hostless {
		return false, fmt.Errorf("egress: network %s lets its containers reach the engine's host (the bridge %s has the host address %s): "+
			"create it with the bridge option %s=true (compose: driver_opts), or run the runner on the engine's host",
			info.Name, info.Bridge, info.Gateway, optInhibitIPv4)
	}
	return false, nil
}

// Allowed returns the proxy's allow-list.
func (g *Gateway) Allowed() []string { return g.proxy.Allowed() }

// Close stops the proxy, closes its tunnels and removes its host firewall
// rule (the bridge's chain with the last one). The network is kept, for
// the runner's next start.
func (g *Gateway) Close() error {
	err := g.proxy.Close()
	_ = g.ln.Close()
	if serr := <-g.done; serr != nil && !errors.Is(serr, net.ErrClosed) {
		err = errors.Join(err, serr)
	}
	if g.fw != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*firewallTimeout)
		defer cancel()
		if ferr := g.fw.remove(ctx); ferr != nil {
			err = errors.Join(err, fmt.Errorf("egress: removing the host firewall of network %s: %w", g.Network.Name, ferr))
		}
	}
	return err
}

// containerIdentifier finds the job behind a client address from the
// engine, caching answers briefly (addresses are reused once a container
// is gone).
type containerIdentifier struct {
	cli       *client.Client
	network   string
	host      string
	runLabels func(containerID string) map[string]string // nil: labels only

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
		if c.runLabels != nil {
			if job := jobOf(c.runLabels(ct.ID)); job != "" {
				return job
			}
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
