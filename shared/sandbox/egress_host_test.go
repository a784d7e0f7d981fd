package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/supervisorhq/supervisor/shared/egress"
	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
)

// TestDockerEgressHostUnreachable checks that an agent container on the
// egress network reaches the proxy and nothing else of the engine's host
// or of the containers outside its network: a port listening on all the
// host's addresses is refused on the network's gateway and on every other
// address of the host, and so is a container listening on the default
// bridge network, while containers on the default network reach both (so
// the listeners are up) and the proxy still serves the agent. Once the
// gateway is closed its firewall rules are gone.
func TestDockerEgressHostUnreachable(t *testing.T) {
	t.Parallel()
	host := fmt.Sprintf("sandbox-test-%d-%s", os.Getpid(), t.Name())
	base, img := dockerTest(t, DockerOptions{Host: host})
	sandboxtest.HostFirewall(t)
	cli := base.Client()
	ctx := context.Background()

	// A service of the host on all its addresses.
	hostLn, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostLn.Close() })
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "hello\n")
			c.Close()
		}
	}()
	hostPort := strconv.Itoa(hostLn.Addr().(*net.TCPAddr).Port)

	// A container outside the egress network, listening.
	other := startListener(t, cli, img, "bridge")

	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from allowed")
	}))
	t.Cleanup(srv.Close)
	netName := fmt.Sprintf("supervisor-egress-host-test-%d", os.Getpid())
	gw, err := egress.StartGateway(ctx, egress.GatewayOptions{
		Client: cli, Network: netName, Host: host,
		Proxy: egress.Options{
			Allow: []string{"allowed.test:443"},
			Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, strings.TrimPrefix(srv.URL, "https://"))
			},
		},
	})
	if err != nil {
		t.Fatalf("StartGateway: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = gw.Close()
		}
		if err := cli.NetworkRemove(context.Background(), netName); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})

	// Every address of the host (but loopback, which a container's own
	// namespace answers), the gateway (the proxy's address) among them.
	targets := []string{net.JoinHostPort(gw.Network.Gateway.String(), hostPort)}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.To4() == nil || ipn.IP.Equal(gw.Network.Gateway) {
			continue
		}
		targets = append(targets, net.JoinHostPort(ipn.IP.String(), hostPort))
	}
	otherAddr := net.JoinHostPort(other, "8080")

	// Controls: from the default network, the host's service (on the
	// default bridge's gateway) and the other container answer.
	bridge, err := cli.NetworkInspect(ctx, "bridge", network.InspectOptions{})
	if err != nil || len(bridge.IPAM.Config) == 0 {
		t.Fatalf("default bridge network: %+v, %v", bridge.IPAM, err)
	}
	bridgeGW := bridge.IPAM.Config[0].Gateway
	if bridgeGW == "" { // older engines leave it empty: the subnet's first address
		_, subnet, err := net.ParseCIDR(bridge.IPAM.Config[0].Subnet)
		if err != nil || subnet.IP.To4() == nil {
			t.Fatalf("default bridge network's subnet %q: %v", bridge.IPAM.Config[0].Subnet, err)
		}
		ip := append(net.IP(nil), subnet.IP.To4()...)
		ip[3]++
		bridgeGW = ip.String()
	}
	for _, target := range []string{net.JoinHostPort(bridgeGW, hostPort), otherAddr} {
		if code, out := runContainer(t, cli, img, "bridge", "tcp-connect", target); code != 0 {
			t.Fatalf("control: a container on the default network cannot reach %s (exit %d): %s", target, code, out)
		}
	}

	d, err := NewDocker(ctx, DockerOptions{Host: host, EgressNetwork: netName, EgressProxy: gw.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	agent := func(args ...string) Result {
		spec := probeSpec(t, img, args...)
		spec.Network = []string{"allowed.test:443"}
		return runDocker(t, d, spec)
	}
	for _, target := range append(targets, otherAddr) {
		if res := agent("tcp-connect", target); res.ExitCode != 1 {
			t.Errorf("an agent container reached %s: %+v stdout %q", target, res, res.Stdout)
		} else {
			t.Logf("%s: %s", target, strings.TrimSpace(string(res.Stderr)))
		}
	}
	if res := agent("https-get", "https://allowed.test/"); res.ExitCode != 0 || string(res.Stdout) != "200 hello from allowed\n" {
		t.Errorf("through the proxy: %+v stdout %q stderr %q", res, res.Stdout, res.Stderr)
	}

	closed = true
	if err := gw.Close(); err != nil {
		t.Fatalf("gateway Close: %v", err)
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(tool, "-w", "-S", "INPUT").CombinedOutput()
		if err != nil {
			t.Fatalf("%s -S INPUT: %v: %s", tool, err, out)
		}
		if strings.Contains(string(out), "-i "+gw.Network.Bridge+" ") {
			t.Errorf("%s: the rule for %s outlived the gateway:\n%s", tool, gw.Network.Bridge, out)
		}
	}
}

// TestDockerHostlessEgressNetwork checks the egress network of a runner in
// a container (compose.docker-sandbox.yaml): created with the bridge
// option that leaves the host no address on it, its containers reach a
// container on it (where the runner's proxy listens) but none of the
// host's addresses; and a runner on the host refuses it, its proxy having
// nowhere to listen.
func TestDockerHostlessEgressNetwork(t *testing.T) {
	t.Parallel()
	host := fmt.Sprintf("sandbox-test-%d-%s", os.Getpid(), t.Name())
	base, img := dockerTest(t, DockerOptions{Host: host})
	cli := base.Client()
	ctx := context.Background()

	hostLn, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostLn.Close() })
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	hostPort := strconv.Itoa(hostLn.Addr().(*net.TCPAddr).Port)

	netName := fmt.Sprintf("supervisor-egress-hostless-test-%d", os.Getpid())
	if _, err := cli.NetworkCreate(ctx, netName, network.CreateOptions{
		Driver: "bridge", Internal: true,
		Options: map[string]string{"com.docker.network.bridge.inhibit_ipv4": "true"},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cli.NetworkRemove(context.Background(), netName); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})
	info, err := egress.EnsureNetwork(ctx, cli, netName, host)
	if err != nil || !info.Hostless {
		t.Fatalf("EnsureNetwork: %+v, %v; want a hostless network", info, err)
	}

	// The runner's stand-in, on the network.
	proxy := startListener(t, cli, img, netName)
	if code, out := runContainer(t, cli, img, netName, "tcp-connect", net.JoinHostPort(proxy, "8080")); code != 0 {
		t.Fatalf("a container on the network cannot reach another on it (exit %d): %s", code, out)
	}
	targets := []string{net.JoinHostPort(info.Gateway.String(), hostPort)}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			targets = append(targets, net.JoinHostPort(ipn.IP.String(), hostPort))
		}
	}
	for _, target := range targets {
		if code, out := runContainer(t, cli, img, netName, "tcp-connect", target); code != 1 {
			t.Errorf("a container on the hostless network reached %s (exit %d): %s", target, code, out)
		}
	}

	_, err = egress.StartGateway(ctx, egress.GatewayOptions{Client: cli, Network: netName, Host: host,
		Proxy: egress.Options{Allow: []string{"allowed.test:443"}}})
	if err == nil || !strings.Contains(err.Error(), "docker network connect") {
		t.Errorf("StartGateway on the host with a hostless network: %v; want the advice to attach a container", err)
	}
}

// startListener runs the probe listening on :8080 in a container on
// network and returns the container's address there; the container is
// removed when the test ends.
func startListener(t *testing.T, cli *client.Client, img, networkName string) string {
	t.Helper()
	ctx := context.Background()
	created, err := cli.ContainerCreate(ctx, &container.Config{
		Image: img, Entrypoint: []string{sandboxtest.ProbePath}, Cmd: []string{"listen", ":8080"},
		Labels: map[string]string{sandboxtest.LabelTest: "1"},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(networkName)}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		in, err := cli.ContainerInspect(ctx, created.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ep := in.NetworkSettings.Networks[networkName]; ep != nil && ep.IPAddress != "" && in.State.Running {
			logs := containerLogs(t, cli, created.ID)
			if strings.Contains(logs, "listening") {
				return ep.IPAddress
			}
		}
		if !in.State.Running && in.State.Status != "created" {
			t.Fatalf("the listener on %s stopped: %s", networkName, containerLogs(t, cli, created.ID))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener on %s did not start: %s", networkName, containerLogs(t, cli, created.ID))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runContainer runs the probe with args in a container on network and
// returns its exit status and output.
func runContainer(t *testing.T, cli *client.Client, img, networkName string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created, err := cli.ContainerCreate(ctx, &container.Config{
		Image: img, Entrypoint: []string{sandboxtest.ProbePath}, Cmd: args,
		Labels: map[string]string{sandboxtest.LabelTest: "1"},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(networkName), CapDrop: []string{"ALL"}}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true})
	}()
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNextExit)
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-waitC:
		return int(res.StatusCode), containerLogs(t, cli, created.ID)
	case err := <-errC:
		t.Fatalf("waiting for the probe %v: %v", args, err)
	}
	return -1, ""
}

func containerLogs(t *testing.T, cli *client.Client, id string) string {
	t.Helper()
	rc, err := cli.ContainerLogs(context.Background(), id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("container logs: %v", err)
	}
	defer rc.Close()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, rc)
	return out.String()
}
