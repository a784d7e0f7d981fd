package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/docker/docker/api/types/network"

	"github.com/supervisorhq/supervisor/shared/egress"
	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestDockerEgressProxy runs the whole egress path against the real engine:
// an internal network created by egress.StartGateway, the proxy listening
// on its gateway in this process, and agent containers on the network that
// reach an allowed (local) HTTPS server through HTTPS_PROXY and are refused
// another, the refusal logged with the host and the container's job.
func TestDockerEgressProxy(t *testing.T) {
	t.Parallel()
	host := fmt.Sprintf("sandbox-test-%d-%s", os.Getpid(), t.Name())
	base, img := dockerTest(t, DockerOptions{Host: host})
	sandboxtest.HostFirewall(t)
	ctx := context.Background()

	serve := func(name string) string {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s %s", name, r.URL.Path)
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "https://")
	}
	// Both servers listen on this machine's loopback, which no container
	// reaches by itself; the proxy maps the names to them.
	backends := map[string]string{"allowed.test:443": serve("allowed"), "other.test:443": serve("other")}
	var logs testkit.Buffer
	var prestarted atomic.Pointer[Docker]
	netName := fmt.Sprintf("supervisor-egress-test-%d", os.Getpid())
	gw, err := egress.StartGateway(ctx, egress.GatewayOptions{
		Client: base.Client(), Network: netName, Host: host,
		Proxy: egress.Options{
			Allow: []string{"allowed.test:443"},
			Log:   slog.New(slog.NewTextHandler(&logs, nil)),
			Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if b, ok := backends[addr]; ok {
					addr = b
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		},
		RunLabels: func(id string) map[string]string {
			if p := prestarted.Load(); p != nil {
				return p.RunLabels(id)
			}
			return nil
		},
	})
	if err != nil {
		t.Fatalf("StartGateway: %v", err)
	}
	t.Cleanup(func() {
		if err := gw.Close(); err != nil {
			t.Errorf("gateway Close: %v", err)
		}
		if err := base.Client().NetworkRemove(context.Background(), netName); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})
	nw, err := base.Client().NetworkInspect(ctx, netName, network.InspectOptions{})
	if err != nil || !nw.Internal {
		t.Fatalf("network %s: internal=%v, %v", netName, nw.Internal, err)
	}
	if !strings.HasPrefix(gw.URL, "http://"+gw.Network.Gateway.String()+":") {
		t.Errorf("the proxy listens at %s, not on the gateway %s", gw.URL, gw.Network.Gateway)
	}
	// A second start reuses the network.
	if info, err := egress.EnsureNetwork(ctx, base.Client(), netName, host); err != nil || info.ID != gw.Network.ID {
		t.Errorf("EnsureNetwork again: %+v, %v; want id %s", info, err, gw.Network.ID)
	}

	d, err := NewDocker(ctx, DockerOptions{Host: host, EgressNetwork: netName, EgressProxy: gw.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })

	spec := probeSpec(t, img, "https-get", "https://allowed.test/v1/messages")
	spec.Network = []string{"allowed.test:443"}
	spec.Labels = map[string]string{"job": "job-allowed"}
	res := runDocker(t, d, spec)
	if res.ExitCode != 0 || string(res.Stdout) != "200 hello from allowed /v1/messages\n" {
		t.Fatalf("allowed: %+v stdout %q stderr %q\nproxy log:\n%s", res, res.Stdout, res.Stderr, logs.String())
	}

	spec = probeSpec(t, img, "https-get", "https://other.test/")
	spec.Network = []string{"allowed.test:443"}
	spec.Labels = map[string]string{"job": "job-denied"}
	res = runDocker(t, d, spec)
	if res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "Forbidden") {
		t.Fatalf("denied: %+v stdout %q stderr %q", res, res.Stdout, res.Stderr)
	}
	if want := `msg="egress denied" host=other.test port=443 job=job-denied`; !strings.Contains(logs.String(), want) {
		t.Errorf("proxy log lacks %q:\n%s", want, logs.String())
	}

	// Without the proxy there is no way out: the network does not forward.
	spec = probeSpec(t, img, "tcp-connect", "203.0.113.1:443")
	spec.Network = []string{"allowed.test:443"}
	if res := runDocker(t, d, spec); res.ExitCode != 1 {
		t.Errorf("a container on the egress network connected out directly: %+v", res)
	}

	// A container started ahead of its job (PERF-63) joins the network
	// too, and the proxy names its job from the sandbox, not its labels.
	p, err := NewDocker(ctx, DockerOptions{Host: host, EgressNetwork: netName, EgressProxy: gw.URL,
		Prestart: true, Helper: sandboxtest.Helper(t), Caches: CacheOptions{Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	prestarted.Store(p)
	t.Cleanup(func() { p.Close() })
	ws := newWorkspace(t)
	spec = Spec{Argv: []string{"probe", "https-get", "https://allowed.test/first"}, Workspace: ws, Image: img,
		Network: []string{"allowed.test:443"}, Labels: map[string]string{"job": "job-first"}}
	if res := runDocker(t, p, spec); res.ExitCode != 0 || res.Prestarted {
		t.Fatalf("first run: %+v stdout %q stderr %q", res, res.Stdout, res.Stderr)
	}
	spec.Argv = []string{"probe", "https-get", "https://other.test/"}
	spec.Labels = map[string]string{"job": "job-prestarted"}
	res = runPrestarted(t, p, spec)
	if res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "Forbidden") {
		t.Fatalf("denied, prestarted: %+v stdout %q stderr %q", res, res.Stdout, res.Stderr)
	}
	if want := `msg="egress denied" host=other.test port=443 job=job-prestarted`; !strings.Contains(logs.String(), want) {
		t.Errorf("proxy log lacks %q:\n%s", want, logs.String())
	}
}
