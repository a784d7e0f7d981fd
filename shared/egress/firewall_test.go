package egress

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
)

// TestNeedsFirewall: a proxy on the gateway needs the host firewall; one
// inside the subnet (a runner in a container) is accepted only on a
// network whose bridge has no host address, and refused with the option
// to set otherwise.
func TestNeedsFirewall(t *testing.T) {
	_, subnet, _ := net.ParseCIDR("192.168.160.0/20")
	info := NetworkInfo{Name: "eg", Gateway: net.ParseIP("192.168.160.1").To4(), Subnet: subnet, Bridge: "sup-eg-1"}
	if fw, err := needsFirewall(info, net.ParseIP("192.168.160.1")); !fw || err != nil {
		t.Errorf("on the gateway: %v, %v; want the firewall", fw, err)
	}
	_, err := needsFirewall(info, net.ParseIP("192.168.160.5"))
	if err == nil || !strings.Contains(err.Error(), "com.docker.network.bridge.inhibit_ipv4=true") || !strings.Contains(err.Error(), "network eg") {
		t.Errorf("in the subnet of a network with a host address: %v; want a refusal naming the option", err)
	}
	info.Hostless = true
	if fw, err := needsFirewall(info, net.ParseIP("192.168.160.5")); fw || err != nil {
		t.Errorf("in the subnet of a hostless network: %v, %v; want no firewall and no error", fw, err)
	}
}

// TestBridgeName: the bridge named by the network's options, else the
// engine's br-<id>.
func TestBridgeName(t *testing.T) {
	if got := bridgeName(map[string]string{"com.docker.network.bridge.name": "sup-eg-ab"}, "0123456789abcdef"); got != "sup-eg-ab" {
		t.Errorf("named: %q", got)
	}
	if got := bridgeName(nil, "0123456789abcdef"); got != "br-0123456789ab" {
		t.Errorf("default: %q", got)
	}
	if c := firewallChain("sup-eg-ab"); len(c) > 28 || !strings.HasPrefix(c, "SUP-EGRESS-") {
		t.Errorf("chain %q: iptables allows 28 characters", c)
	}
}

// TestHostFirewallRules installs and removes the rules with the real
// iptables (a bridge name of its own, which needs no such interface):
// two gateways on one bridge share its chain until the last one leaves, a
// rule left by a dead runner is taken over by the next on its port, and
// nothing is left at the end.
func TestHostFirewallRules(t *testing.T) {
	sandboxtest.HostFirewall(t)
	ctx := context.Background()
	bridge := fmt.Sprintf("sup-t-%d", os.Getpid()%1000000)
	ip := net.ParseIP("192.0.2.200")
	rules := func(tool string) string {
		t.Helper()
		out, err := iptablesOutput(ctx, tool, "-S")
		if err != nil {
			t.Fatal(err)
		}
		var mine []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, firewallChain(bridge)) {
				mine = append(mine, l)
			}
		}
		return strings.Join(mine, "\n")
	}
	t.Cleanup(func() {
		if left := rules("iptables") + rules("ip6tables"); left != "" {
			t.Errorf("rules left behind:\n%s", left)
			_ = (&hostFirewall{bridge: bridge, chain: firewallChain(bridge)}).remove(context.Background())
		}
	})

	a, err := installFirewall(ctx, bridge, ip, 3128)
	if err != nil {
		t.Fatal(err)
	}
	b, err := installFirewall(ctx, bridge, ip, 3129)
	if err != nil {
		t.Fatal(err)
	}
	v4 := rules("iptables")
	for _, want := range []string{
		"-A INPUT -i " + bridge + " -j " + a.chain,
		"-A " + a.chain + " -d 192.0.2.200/32 -p tcp -m tcp --dport 3128 -j ACCEPT",
		"-A " + a.chain + " -d 192.0.2.200/32 -p tcp -m tcp --dport 3129 -j ACCEPT",
		"-A " + a.chain + " -j REJECT",
	} {
		if !strings.Contains(v4, want) {
			t.Errorf("iptables lacks %q:\n%s", want, v4)
		}
	}
	if strings.Index(v4, "--dport 3129") > strings.Index(v4, "-j REJECT") {
		t.Errorf("an accept rule comes after the reject:\n%s", v4)
	}
	if v6 := rules("ip6tables"); !strings.Contains(v6, "-A INPUT -i "+bridge+" -j "+a.chain) || !strings.Contains(v6, "-A "+a.chain+" -j REJECT") {
		t.Errorf("ip6tables lacks the bridge's reject:\n%s", v6)
	}

	// a's runner dies (no remove) and restarts on its port.
	a2, err := installFirewall(ctx, bridge, ip, 3128)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(rules("iptables"), "--dport 3128 -j ACCEPT"); n != 1 {
		t.Errorf("%d accept rules for port 3128 after the restart, want 1", n)
	}
	if err := a2.remove(ctx); err != nil {
		t.Fatal(err)
	}
	v4 = rules("iptables")
	if strings.Contains(v4, "--dport 3128") || !strings.Contains(v4, "--dport 3129") || !strings.Contains(v4, "-A INPUT -i "+bridge) {
		t.Errorf("after the first gateway left, want only the second's rule and the chain:\n%s", v4)
	}
	if err := b.remove(ctx); err != nil {
		t.Fatal(err)
	}
	if left := rules("iptables") + rules("ip6tables"); left != "" {
		t.Errorf("after the last gateway left:\n%s", left)
	}
}
