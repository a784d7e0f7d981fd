package jobrun

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestSelectSandboxProcessUser: --sandbox-process-user decides who process
// sandbox commands run as; the start-up warning is one line naming the
// user and every protection that is off, with why (SBX-11, SBX-15).
func TestSelectSandboxProcessUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testkit.Missing(t, "root (to switch users)")
	}
	open := t.TempDir()
	for d := open; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	private := filepath.Join(open, "private") // out of other users' reach
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, setting, dataDir string
		wantErr                string
		wantUser               string
		wantOff                []string // in the log, after PROTECTIONS OFF
	}{
		{"auto", "", open, "", "user=65534:65534", nil},
		{"auto, explicit", "auto", open, "", "user=65534:65534", nil},
		{"auto, private data dir", "auto", private, "", `user="the runner's own"`,
			[]string{"sandbox-user: the data directory is out of the default sandbox user's reach", "runner-environment: commands run as root"}},
		{"off", "off", open, "", `user="the runner's own"`, []string{"sandbox-user: --sandbox-process-user=off"}},
		{"uid:gid", "4242:4243", open, "", "user=4242:4243", nil},
		{"name", "nobody", open, "", "user=65534:65534", nil},
		{"uid:gid, private data dir", "4242:4243", private, "data directory is out of its reach", "", nil},
		{"root", "0:0", open, "must not be 0", "", nil},
		{"unknown user", "no-such-user-supervisor", open, "no-such-user-supervisor", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, logs := captureLog()
			sel, err := SelectSandbox(context.Background(), Settings{Sandbox: SandboxProcess, SandboxPath: sandbox.BasePath, ProcessUser: tt.setting},
				filepath.Join(tt.dataDir, strings.ReplaceAll(tt.name, " ", "-")), "h", log)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--sandbox-process-user") {
					t.Fatalf("err = %v, want one about --sandbox-process-user containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sel.Close()
			out := logs.String()
			if n := strings.Count(out, "level=WARN"); n != 1 {
				t.Errorf("%d WARN lines, want 1:\n%s", n, out)
			}
			if !strings.Contains(out, tt.wantUser) {
				t.Errorf("log lacks %s:\n%s", tt.wantUser, out)
			}
			if len(tt.wantOff) == 0 && (strings.Contains(out, "PROTECTIONS OFF") || len(sel.Off) > 0) {
				t.Errorf("protections off %v:\n%s", sel.Off, out)
			}
			for _, want := range tt.wantOff {
				if !strings.Contains(out, "PROTECTIONS OFF") || !strings.Contains(out, want) {
					t.Errorf("log lacks PROTECTIONS OFF … %q:\n%s", want, out)
				}
				if name, _, _ := strings.Cut(want, ":"); !slices.Contains(sel.Off, name) {
					t.Errorf("Selected.Off = %v, want %s in it", sel.Off, name)
				}
			}
		})
	}
}
