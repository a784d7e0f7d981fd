package workspace

import (
	"os/exec"
	"strings"
	"testing"
)

// gitAcceptsBranch asks git check-ref-format about refs/heads/<branch>.
func gitAcceptsBranch(t testing.TB, branch string) bool {
	t.Helper()
	err := exec.Command("git", "check-ref-format", "refs/heads/"+branch).Run()
	if err == nil {
		return true
	}
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("git check-ref-format: %v", err)
	}
	return false
}

// The names plainBranch accepts without a process are names git accepts
// too (PERF-67); the others are left to git, which still refuses the bad
// ones through checkBranch.
func TestPlainBranchIsASubsetOfGits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plain bool
	}{
		{"supervisor/wf-ac5lamgpaht2", true},
		{"main", true},
		{"sup/wf1", true},
		{"feature/a.b_c-1", true},
		{"v1.2", true},
		{"", false},
		{"a..b", false},
		{"a/", false},
		{"/a", false},
		{"a//b", false},
		{".hidden", false},
		{"a/.b", false},
		{"a.lock", false},
		{"a/b.lock/c", false},
		{"a.", false},
		{"a b", false},
		{"a~1", false},
		{"a^", false},
		{"a:b", false},
		{"a?", false},
		{"a*", false},
		{"a[b", false},
		{"a\\b", false},
		{"a@{b", false},
		{"@", false},
		{"é", false},
		{"a\x7f", false},
		{strings.Repeat("a", 256), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := plainBranch(tc.name); got != tc.plain {
				t.Fatalf("plainBranch(%q) = %v, want %v", tc.name, got, tc.plain)
			}
			if tc.plain && !gitAcceptsBranch(t, tc.name) {
				t.Fatalf("plainBranch accepts %q, which git refuses", tc.name)
			}
			_, err := checkBranch(t.Context(), tc.name)
			if git := tc.name != "" && gitAcceptsBranch(t, tc.name); (err == nil) != git {
				t.Fatalf("checkBranch(%q): %v; git accepts it: %v", tc.name, err, git)
			}
		})
	}
}

// FuzzPlainBranchIsASubsetOfGits checks that any name plainBranch accepts
// git check-ref-format accepts too.
func FuzzPlainBranchIsASubsetOfGits(f *testing.F) {
	for _, s := range []string{"supervisor/wf-x", "a..b", "a/.b", "a.lock", "a-b_c.d/e", "x/y.z."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if plainBranch(name) && !gitAcceptsBranch(t, name) {
			t.Fatalf("plainBranch accepts %q, which git refuses", name)
		}
	})
}
