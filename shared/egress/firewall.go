package egress

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The host firewall of an egress network.
//
// A container on an internal bridge network reaches every address of the
// engine's host: the bridge's own (the network's gateway) and, through it,
// the host's other addresses (the kernel delivers them locally; the
// FORWARD chain the engine fills is never consulted). A runner on the
// engine's host therefore closes its network with a chain of the host's
// INPUT table per bridge: the proxy's address and port are accepted,
// anything else arriving on the bridge is rejected (IPv4 and IPv6). Each
// gateway adds its own accept rule and removes it on Close; the last one
// removes the chain. A runner that dies leaves the chain in place, closed
// but for its (now unanswered) port; its next start on the same port takes
// that rule over.
//
// Containers on the network still reach each other and the proxy; the
// engine's own rules drop their traffic to other networks.

// firewallTimeout bounds one iptables command.
const firewallTimeout = 20 * time.Second

// hostFirewall is the rule of one gateway on one bridge.
type hostFirewall struct {
	bridge string
	chain  string
	accept []string // the accept rule's arguments, after the chain
}

// firewallChain names the chain of a bridge (at most 28 characters).
func firewallChain(bridge string) string {
	return "SUP-EGRESS-" + shortHash(bridge, 12)
}

// bridgeName is the Linux bridge of a bridge network: the name its
// options give, else the engine's default ("br-" and the id's first 12
// characters).
func bridgeName(options map[string]string, id string) string {
	if b := options["com.docker.network.bridge.name"]; b != "" {
		return b
	}
	return "br-" + id[:min(12, len(id))]
}

// installFirewall makes the host reject everything that arrives on bridge
// but TCP to ip:port. The caller listens on ip:port already.
func installFirewall(ctx context.Context, bridge string, ip net.IP, port int) (*hostFirewall, error) {
	fw := &hostFirewall{
		bridge: bridge,
		chain:  firewallChain(bridge),
		accept: []string{"-p", "tcp", "-d", ip.String(), "--dport", strconv.Itoa(port), "-j", "ACCEPT"},
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		if err := fw.ensureChain(ctx, tool); err != nil {
			_ = fw.remove(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	// A rule left by a runner that died on this address and port (the
	// listener proved it gone) is taken over rather than doubled.
	if iptables(ctx, "iptables", append([]string{"-C", fw.chain}, fw.accept...)...) == nil {
		return fw, nil
	}
	if err := iptables(ctx, "iptables", append([]string{"-I", fw.chain, "1"}, fw.accept...)...); err != nil {
		_ = fw.remove(context.WithoutCancel(ctx))
		return nil, err
	}
	return fw, nil
}

// ensureChain creates the bridge's chain of tool (iptables or ip6tables)
// ending in a reject, and the INPUT rule sending the bridge's traffic to
// it, unless they exist.
func (fw *hostFirewall) ensureChain(ctx context.Context, tool string) error {
	if iptables(ctx, tool, "-n", "-L", fw.chain) != nil {
		if err := iptables(ctx, tool, "-N", fw.chain); err != nil && iptables(ctx, tool, "-n", "-L", fw.chain) != nil {
			return err
		}
	}
	reject := []string{"-j", "REJECT"}
	if iptables(ctx, tool, append([]string{"-C", fw.chain}, reject...)...) != nil {
		if err := iptables(ctx, tool, append([]string{"-A", fw.chain}, reject...)...); err != nil {
			return err
		}
	}
	jump := []string{"-i", fw.bridge, "-j", fw.chain}
	if iptables(ctx, tool, append([]string{"-C", "INPUT"}, jump...)...) != nil {
		if err := iptables(ctx, tool, append([]string{"-I", "INPUT", "1"}, jump...)...); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the gateway's accept rule, and the bridge's chain once
// no gateway's rule is left in it.
func (fw *hostFirewall) remove(ctx context.Context) error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if iptables(ctx, "iptables", append([]string{"-C", fw.chain}, fw.accept...)...) == nil {
		keep(iptables(ctx, "iptables", append([]string{"-D", fw.chain}, fw.accept...)...))
	}
	if out, err := iptablesOutput(ctx, "iptables", "-S", fw.chain); err == nil && strings.Contains(out, "-j ACCEPT") {
		return first // another gateway still serves this bridge
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		jump := []string{"-i", fw.bridge, "-j", fw.chain}
		for iptables(ctx, tool, append([]string{"-C", "INPUT"}, jump...)...) == nil {
			if err := iptables(ctx, tool, append([]string{"-D", "INPUT"}, jump...)...); err != nil {
				keep(err)
				break
			}
		}
		if iptables(ctx, tool, "-n", "-L", fw.chain) == nil {
			keep(iptables(ctx, tool, "-F", fw.chain))
			keep(iptables(ctx, tool, "-X", fw.chain))
		}
	}
	return first
}

// iptables runs tool (iptables or ip6tables) with args, waiting for the
// xtables lock.
func iptables(ctx context.Context, tool string, args ...string) error {
	_, err := iptablesOutput(ctx, tool, args...)
	return err
}

func iptablesOutput(ctx context.Context, tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, firewallTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, append([]string{"-w"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
