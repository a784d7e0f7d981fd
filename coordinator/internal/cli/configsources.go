package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/coordinator/internal/roles"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/shared/gates"
)

// addConfigSourceFlags adds the flags naming the built-in and user
// directories of roles and workflow templates.
func addConfigSourceFlags(fs *pflag.FlagSet) {
	fs.String("builtin-roles", "", "directory of built-in roles (default: configs/roles next to the binary or in the working directory)")
	fs.String("user-roles", roles.DefaultUserDir(), "the user's roles directory")
	fs.String("builtin-templates", "", "directory of built-in workflow templates (default: configs/templates next to the binary or in the working directory)")
	fs.String("user-templates", userConfigDir("templates"), "the user's workflow templates directory")
}

// userConfigDir returns ~/.supervisor/kind, or "" if the home directory is
// unknown.
func userConfigDir(kind string) string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".supervisor", kind)
}

// builtinConfigDir finds a built-in config directory (gates, roles,
// templates): the flag, else ../configs/kind beside the executable, else
// ./configs/kind, else /etc/supervisor/kind; "" when none exists.
func builtinConfigDir(kind, flag string) string {
	if flag != "" {
		return flag
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "..", "configs", kind))
	}
	candidates = append(candidates, filepath.Join("configs", kind), filepath.Join("/etc/supervisor", kind))
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			abs, _ := filepath.Abs(c)
			return abs
		}
	}
	return ""
}

// readLayers reads the built-in and user directories of kind.
func (e *env) readLayers(kind string) ([]overlay.File, error) {
	files, problems := overlay.ReadLayers(builtinConfigDir(kind, e.v.GetString("builtin-"+kind)), e.v.GetString("user-"+kind))
	if len(problems) > 0 {
		return nil, &ExitError{Code: ExitInvalid, Err: &gates.ValidationError{Problems: problems}}
	}
	return files, nil
}

// roleSource reads the built-in and user roles once, checks that they
// resolve, and returns the source that adds a submission's project roles.
func (e *env) roleSource() (service.RoleSource, error) {
	files, err := e.readLayers("roles")
	if err != nil {
		return nil, err
	}
	if _, err := roles.FromFiles(files, nil); err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: err}
	}
	return func(project []overlay.File) (*roles.Catalogue, error) {
		return roles.FromFiles(append(append([]overlay.File(nil), files...), project...), nil)
	}, nil
}

// projectConfigFiles reads the repository's .supervisor/<kind>/*.yaml at
// commit. Untrusted, it only warns that they are ignored (they shape what
// agents are told and which gates run, as project gates do: LD-03).
func projectConfigFiles(ctx context.Context, repo, commit, kind string, trusted bool, warn io.Writer) ([]api.GateFile, error) {
	dir := ".supervisor/" + kind
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "ls-tree", "--name-only", commit, "--", dir+"/").Output()
	if err != nil {
		return nil, fmt.Errorf("list %s at %s: %w", dir, commit, err)
	}
	var names []string
	for _, name := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch strings.ToLower(path.Ext(name)) {
		case ".yaml", ".yml":
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	if !trusted {
		fmt.Fprintf(warn, "coordinator: ignoring %s/: project %s choose what agents run and are told; pass --trust-project-gates to use them\n", dir, kind)
		return nil, nil
	}
	files := make([]api.GateFile, 0, len(names))
	for _, name := range names {
		data, err := exec.CommandContext(ctx, "git", "-C", repo, "show", commit+":"+name).Output()
		if err != nil {
			return nil, fmt.Errorf("read %s at %s: %w", name, commit, err)
		}
		if len(data) > overlay.MaxFileSize {
			return nil, exitf(ExitInvalid, "%s: %d bytes, over the %d-byte limit", name, len(data), overlay.MaxFileSize)
		}
		files = append(files, api.GateFile{Filename: filepath.Join(repo, name), Content: string(data)})
	}
	return files, nil
}
