package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func envID(t *testing.T, p *Process, spec Spec) string {
	t.Helper()
	id, err := p.EnvironmentID(context.Background(), spec)
	if err != nil {
		t.Fatalf("EnvironmentID(%q): %v", spec.Argv, err)
	}
	if !strings.HasPrefix(id, "process:") || len(id) != len("process:")+64 {
		t.Fatalf("EnvironmentID = %q, want process:<sha256>", id)
	}
	return id
}

func writeTool(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestProcessEnvironmentID(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	tool := filepath.Join(bin, "gate-tool")
	writeTool(t, tool, "#!/bin/sh\nexit 0\n")
	ws := newWorkspace(t)

	p := NewProcess(ProcessOptions{Path: bin + ":" + BasePath})
	spec := Spec{Argv: []string{"gate-tool", "--check"}, Workspace: ws}
	id := envID(t, p, spec)

	// The same binary and PATH: the same id, from another sandbox value
	// too, and whatever the arguments or workspace.
	if again := envID(t, NewProcess(ProcessOptions{Path: bin + ":" + BasePath}), Spec{Argv: []string{"gate-tool"}, Workspace: newWorkspace(t)}); again != id {
		t.Errorf("same binary and PATH: %s then %s", id, again)
	}
	// Looked up by absolute path: the same program, but named differently.
	if abs := envID(t, p, Spec{Argv: []string{tool}, Workspace: ws}); abs != id {
		t.Errorf("absolute path gives %s, bare name %s", abs, id)
	}

	// Another user commands run as: another id (SBX-11).
	for _, u := range []RunAs{{UID: 65534, GID: 65534}, {UID: 4242, GID: 4242}} {
		if idU := envID(t, NewProcess(ProcessOptions{Path: bin + ":" + BasePath, RunAs: &u}), spec); idU == id {
			t.Errorf("running as %s gives the same id as the runner's user", u)
		}
	}

	// Another PATH, same binary found: another id.
	other := NewProcess(ProcessOptions{Path: BasePath + ":" + bin})
	if id2 := envID(t, other, spec); id2 == id {
		t.Error("a different PATH gives the same id")
	}

	// Another binary of the same name earlier in PATH: another id.
	bin2 := t.TempDir()
	writeTool(t, filepath.Join(bin2, "gate-tool"), "#!/bin/sh\nexit 0\n")
	shadow := NewProcess(ProcessOptions{Path: bin2 + ":" + bin + ":" + BasePath})
	if id3 := envID(t, shadow, spec); id3 == id {
		t.Error("a different binary gives the same id")
	}

	// The binary rebuilt in place (same size, new content and mtime): a
	// new id, not the remembered hash.
	writeTool(t, tool, "#!/bin/sh\nexit 1\n")
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(tool, future, future); err != nil {
		t.Fatal(err)
	}
	if rebuilt := envID(t, p, spec); rebuilt == id {
		t.Error("a rebuilt binary gives the same id")
	}

	// A real system tool resolves and is stable.
	sh := Spec{Argv: []string{"sh", "-c", "true"}, Workspace: ws}
	if a, b := envID(t, p, sh), envID(t, p, sh); a != b {
		t.Errorf("sh: %s then %s", a, b)
	}
}

func TestProcessEnvironmentIDRelativeProgram(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{})
	ws1, ws2 := newWorkspace(t), newWorkspace(t)
	for _, ws := range []string{ws1, ws2} {
		if err := os.MkdirAll(filepath.Join(ws, "sub", "scripts"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeTool(t, filepath.Join(ws, "sub", "scripts", "check.sh"), "#!/bin/sh\necho ok\n")
	}
	spec := Spec{Argv: []string{"./scripts/check.sh"}, Workspace: ws1, WorkingDir: "sub"}
	a := envID(t, p, spec)
	spec.Workspace = ws2
	// The workspace path is not part of the id: workspaces are disposable.
	if b := envID(t, p, spec); a != b {
		t.Errorf("the same script in two workspaces: %s and %s", a, b)
	}
	writeTool(t, filepath.Join(ws2, "sub", "scripts", "check.sh"), "#!/bin/sh\necho ko\n")
	if c := envID(t, p, spec); c == a {
		t.Error("a changed script gives the same id")
	}
}

func TestProcessEnvironmentIDErrors(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{})
	ws := newWorkspace(t)
	if _, err := p.EnvironmentID(context.Background(), Spec{Workspace: ws}); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("empty argv: %v, want ErrInvalidSpec", err)
	}
	if _, err := p.EnvironmentID(context.Background(), Spec{Argv: []string{"no-such-gate-tool"}, Workspace: ws}); !errors.Is(err, ErrStart) {
		t.Errorf("missing program: %v, want ErrStart", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A program that is not remembered yet is hashed under ctx.
	bin := t.TempDir()
	writeTool(t, filepath.Join(bin, "fresh-tool"), "#!/bin/sh\n")
	q := NewProcess(ProcessOptions{Path: bin})
	if _, err := q.EnvironmentID(ctx, Spec{Argv: []string{"fresh-tool"}, Workspace: ws}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}
