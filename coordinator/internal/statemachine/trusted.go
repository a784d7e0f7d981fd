package statemachine

// Trusted configuration (TRUST-CONFIG): Supervisor's own configuration in a
// repository — .supervisor/ (gates, roles, templates, context strategies)
// — decides what later trusted runs execute and tell agents. A patch that
// changes it is an integrity violation of its node: it is never
// integrated on the agent's word, by passing gates, an approval policy or
// an approval step's timeout. The node escalates naming the files, and
// only a human's approval that explicitly accepts them (ApproveConfig,
// `coordinator approve --accept-config`) lands it.

import (
	"fmt"
	"strings"
)

// trustedConfigGate names the check in feedback, where it is reported
// like a gate that found an integrity violation.
const trustedConfigGate = "trusted-config"

// TrustedConfigDir is the directory whose files are Supervisor's trusted
// configuration in a repository. A path is trusted configuration when any
// of its components is this name, compared without regard to case (a
// case-insensitive checkout makes .Supervisor the same directory).
const TrustedConfigDir = ".supervisor"

// TrustedConfigPaths returns the paths that are trusted configuration,
// in the order given.
func TrustedConfigPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		for _, c := range strings.Split(p, "/") {
			if strings.EqualFold(c, TrustedConfigDir) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// TrustedConfigChanges says which trusted configuration files the node's
// current patch changes; unlisted is set when its summary does not list
// every file (no summary, or one truncated), so it may change some.
func (n *Node) TrustedConfigChanges() (files []string, unlisted bool) {
	if n.Patch == nil {
		return nil, false
	}
	st := n.Patch.Stat
	if st == nil {
		return nil, true
	}
	return TrustedConfigPaths(st.Paths), st.PathsTruncated
}

// trustedConfigViolation is the failure of a round whose patch changes
// trusted configuration a human has not accepted: an escalation, since
// no retry of the agent can make the change acceptable.
func (n *Node) trustedConfigViolation() (failure, bool) {
	files, unlisted := n.TrustedConfigChanges()
	if len(files) == 0 && !unlisted {
		return failure{}, false
	}
	msg := fmt.Sprintf("integrity violation: the patch changes Supervisor's trusted configuration (%s); "+
		"an agent may not change it unless a human accepts the change (approve --accept-config, reject, or retry)", trustedWhat(files, unlisted))
	return failure{trusted: msg, trustedFiles: files, escalate: msg}, true
}

// trustedWhat names the trusted configuration files a patch changes.
func trustedWhat(files []string, unlisted bool) string {
	what := strings.Join(files, ", ")
	if unlisted {
		if what != "" {
			what += ", and perhaps more: "
		}
		what += "the patch's summary does not list every file it changes, so it may change " + TrustedConfigDir + "/"
	}
	return what
}

// acceptedConfig is what an approval accepting node n's trusted
// configuration changes records: the files, or a note that they are not
// all listed.
func acceptedConfig(n *Node) []string {
	files, unlisted := n.TrustedConfigChanges()
	out := append([]string(nil), files...)
	if unlisted {
		out = append(out, "(the patch's unlisted files)")
	}
	return out
}
