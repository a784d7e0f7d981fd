package egress

import (
	"net"
	"strings"
	"testing"
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
