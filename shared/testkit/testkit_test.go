package testkit_test

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

func TestGitAndWriteFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	testkit.Git(t, "", "init", "--quiet", dir)
	testkit.WriteFile(t, filepath.Join(dir, "a/b/c.txt"), "c\n")
	testkit.Git(t, dir, "add", "--all")
	testkit.Git(t, dir, "commit", "--quiet", "-m", "one")
	if got := testkit.GitOutput(t, dir, "log", "--format=%an <%ae> %s"); got != "Test <test@example.com> one\n" {
		t.Errorf("git log = %q, want the fixed identity, untrimmed", got)
	}
	if got := testkit.Git(t, dir, "branch", "--show-current"); got != "main" {
		t.Errorf("branch = %q, want main", got)
	}
	if got := string(testkit.ReadFile(t, filepath.Join(dir, "a/b/c.txt"))); got != "c\n" {
		t.Errorf("c.txt = %q", got)
	}
}

func TestRepo(t *testing.T) {
	dir, commit := testkit.Repo(t, map[string][]byte{"README.md": []byte("hi\n"), "src/a.txt": []byte("a\n")})
	if head := testkit.Git(t, dir, "rev-parse", "main"); head != commit {
		t.Errorf("main = %s, want %s", head, commit)
	}
	if files := testkit.Git(t, dir, "ls-files"); files != "README.md\nsrc/a.txt" {
		t.Errorf("files = %q", files)
	}
	if st := testkit.Git(t, dir, "status", "--porcelain"); st != "" {
		t.Errorf("status = %q, want clean", st)
	}
}

func TestClock(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c := testkit.NewClock(start)
	c.Advance(time.Minute)
	if got := c.Now(); !got.Equal(start.Add(time.Minute)) {
		t.Errorf("Now = %v", got)
	}
}

func TestWaitFor(t *testing.T) {
	var n atomic.Int32
	testkit.WaitFor(t, 5*time.Second, time.Millisecond, "three calls", func() bool { return n.Add(1) == 3 })
}

func TestBuffer(t *testing.T) {
	var b testkit.Buffer
	done := make(chan struct{})
	for i := range 4 {
		go func() { fmt.Fprintf(&b, "%d", i); done <- struct{}{} }()
	}
	for range 4 {
		<-done
	}
	if got := b.String(); len(got) != 4 {
		t.Errorf("String = %q", got)
	}
}

// problem and problemsError stand in for gates.Problem and
// gates.ValidationError.
type problem struct {
	File         string
	Line, Column int
	Message      string
}

func (p problem) String() string {
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Message)
}

type problemsError struct{ Problems []problem }

func (e *problemsError) Error() string { return fmt.Sprint(e.Problems) }

func TestCheckProblems(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &problemsError{Problems: []problem{
		{File: "f.yaml", Line: 2, Column: 3, Message: "unknown field x"},
		{File: "f.yaml", Message: "empty file"},
	}})
	problems := func(e *problemsError) []problem { return e.Problems }
	testkit.CheckProblems(t, "f.yaml", "a\nbb x\n", err, []string{"2:3: unknown field", ":: empty"}, problems)
	testkit.CheckProblems(t, "", "", nil, nil, problems)
}

func TestReceive(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := testkit.Receive(t, ch, time.Second, "no value"); got != 7 {
		t.Errorf("Receive = %d, want 7", got)
	}
}
