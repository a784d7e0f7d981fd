package sandbox

import (
	"fmt"
	"os"
	"strings"
)

// Names of the process sandbox's protections (Protection.Name).
const (
	// ProtectUser: commands run as a separate unprivileged user, who
	// cannot write the mirrors, the worktrees' .git or the runner's files,
	// nor signal or read the runner.
	ProtectUser = "sandbox-user"
	// ProtectRunnerEnv: the runner is not dumpable, so processes of its
	// own uid cannot read its /proc/PID/environ or ptrace it.
	ProtectRunnerEnv = "runner-environment"
	// ProtectDescendants: the runner is a child subreaper, so a run's
	// processes that leave its process group come back to it and are
	// killed at the run's end.
	ProtectDescendants = "escaped-descendants"
	// ProtectParentDeath: the command gets SIGKILL when the runner dies.
	ProtectParentDeath = "parent-death-signal"
)

// Protection is one safeguard of the process sandbox and whether it is in
// force.
type Protection struct {
	Name string
	// Off says why the protection is not in force ("" = it is).
	Off string
}

// Protections lists the process sandbox's safeguards as this Process
// enforces them, in a fixed order.
func (p *Process) Protections() []Protection {
	setupRunner()
	user := Protection{Name: ProtectUser}
	if p.runAs == nil {
		user.Off = "commands run as the runner's own user"
	}
	env := Protection{Name: ProtectRunnerEnv}
	switch {
	case runner.dumpable != nil:
		env.Off = fmt.Sprintf("prctl(PR_SET_DUMPABLE): %v", runner.dumpable)
	case p.runAs == nil && os.Geteuid() == 0:
		env.Off = "commands run as root, who reads every process's environment"
	}
	desc := Protection{Name: ProtectDescendants}
	if runner.subreaper != nil {
		desc.Off = fmt.Sprintf("prctl(PR_SET_CHILD_SUBREAPER): %v; only the run's process group is killed", runner.subreaper)
	}
	return []Protection{user, env, desc, {Name: ProtectParentDeath}}
}

// OffProtections formats the protections of ps that are off, "name: why"
// joined by "; " ("" if none is).
func OffProtections(ps []Protection) string {
	var off []string
	for _, p := range ps {
		if p.Off != "" {
			off = append(off, p.Name+": "+p.Off)
		}
	}
	return strings.Join(off, "; ")
}
