package workspace

import (
	"os/exec"
	"strings"
	"testing"
)

// checkBranch takes the names protocol.CheckBranchName accepts without
// running git (PERF-67) and leaves the others to git: either way, it
// accepts exactly what git check-ref-format accepts under refs/heads/,
// but for the names git branch reserves.
func TestCheckBranchAgreesWithGit(t *testing.T) {
	for _, name := range []string{
		"supervisor/wf-ac5lamgpaht2", "main", "sup/wf1", "feature/a.b_c-1", "v1.2", "ünï/code", "a@b",
		"", "HEAD", "-x", "a..b", "a/", "/a", "a//b", ".hidden", "a/.b", "a.lock", "a/b.lock/c", "a.",
		"a b", "a~1", "a^", "a:b", "a?", "a*", "a[b", `a\b`, "a@{b", "a\x7f", strings.Repeat("a", 300),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := checkBranch(t.Context(), name)
			reserved := name == "" || name == "HEAD" || strings.HasPrefix(name, "-")
			git := !reserved && exec.Command("git", "check-ref-format", "refs/heads/"+name).Run() == nil
			if (err == nil) != git {
				t.Fatalf("checkBranch(%q): %v; git accepts it: %v", name, err, git)
			}
		})
	}
}
