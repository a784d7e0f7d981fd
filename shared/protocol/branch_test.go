package protocol_test

import (
	"context"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// TestCheckBranchName agrees with git check-ref-format on every name of
// the table, valid and invalid (GIT-03: merge targets are validated
// before anything runs).
func TestCheckBranchName(t *testing.T) {
	t.Parallel()
	names := []struct {
		name  string
		valid bool
	}{
		{"main", true}, {"release/1.2", true}, {"feature/x-y_z", true}, {"a.b", true}, {"ünïcode", true},
		{"a@b", true}, {"x/y/z", true},
		{"", false}, {"HEAD", false}, {"@", false}, {"-x", false}, {"/a", false}, {"a/", false}, {"a.", false},
		{"a..b", false}, {"a@{1}", false}, {"a//b", false}, {"a b", false}, {"a~1", false}, {"a^", false},
		{"a:b", false}, {"a?", false}, {"a*", false}, {"a[b", false}, {`a\b`, false}, {".a", false},
		{"x/.a", false}, {"a.lock", false}, {"x/a.lock/y", false}, {"a\tb", false}, {"a\x7fb", false},
	}
	ctx := context.Background()
	for _, tc := range names {
		err := protocol.CheckBranchName(tc.name)
		if (err == nil) != tc.valid {
			t.Errorf("CheckBranchName(%q) = %v, want valid %v", tc.name, err, tc.valid)
		}
		// git itself agrees (refs/heads/ is what a branch name becomes;
		// git's own branch rules add "-" and "HEAD").
		if tc.name == "" || tc.name == "HEAD" || tc.name == "-x" || tc.name == "@" {
			continue
		}
		_, gerr := gitexec.Runner{}.Text(ctx, "check-ref-format", "refs/heads/"+tc.name)
		if (gerr == nil) != tc.valid {
			t.Errorf("git check-ref-format refs/heads/%q: %v, want valid %v", tc.name, gerr, tc.valid)
		}
	}
}

// FuzzCheckBranchNameAgreesWithGit checks any name against git
// check-ref-format: what CheckBranchName accepts git accepts (the
// workspace takes such a name without running git: PERF-67), and what git
// accepts CheckBranchName accepts too, but for the names git branch
// reserves.
func FuzzCheckBranchNameAgreesWithGit(f *testing.F) {
	for _, s := range []string{"supervisor/wf-x", "a..b", "a/.b", "a.lock", "ünï/code", "a@{1}", "x/y.z.", "a\x00b", "a\xffb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if strings.ContainsRune(name, 0) {
			return // not an argument a process can be given
		}
		err := protocol.CheckBranchName(name)
		_, gerr := gitexec.Runner{}.Text(context.Background(), "check-ref-format", "refs/heads/"+name)
		reserved := name == "" || name == "HEAD" || name == "@" || strings.HasPrefix(name, "-")
		if err == nil && gerr != nil {
			t.Fatalf("CheckBranchName accepts %q, which git refuses: %v", name, gerr)
		}
		if gerr == nil && err != nil && !reserved {
			t.Fatalf("git accepts %q, which CheckBranchName refuses: %v", name, err)
		}
	})
}
