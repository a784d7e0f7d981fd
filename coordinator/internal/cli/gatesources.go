package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/gates"
)

// addGateSourceFlags adds the flags naming the gate sources below the
// project: the built-in gate sets and the user's gate file.
func addGateSourceFlags(fs *pflag.FlagSet) {
	fs.String("builtin-gates", "", "directory of built-in gate sets (default: configs/gates next to the binary or in the working directory)")
	fs.String("user-gates", gates.DefaultUserFile(), "the user's gate file")
}

// builtinGatesDir finds the built-in gate sets: the flag, else
// ../configs/gates beside the executable, else ./configs/gates, else
// /etc/supervisor/gates; "" when none exists.
func builtinGatesDir(flag string) string {
	return builtinConfigDir("gates", flag)
}

// loadGateSources loads the built-in and user gates (the two lowest
// sources). Problems come back with file:line.
func (e *env) loadGateSources() (*gates.Set, error) {
	res, err := gates.Load(gates.Options{
		BuiltinDir: builtinGatesDir(e.v.GetString("builtin-gates")),
		UserFile:   e.v.GetString("user-gates"),
	})
	if err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: err}
	}
	for _, w := range res.Warnings {
		e.log.Warn("gate definition", "warning", w.String())
	}
	return res.Set, nil
}

// projectGates reads the repository's .supervisor/gates.yaml or .toml at
// commit. It returns nil when there is none. Untrusted, it only warns that
// the file is ignored (LD-03).
func projectGates(ctx context.Context, repo, commit string, trusted bool, warn io.Writer) (*api.GateFile, error) {
	for _, name := range []string{".supervisor/gates.yaml", ".supervisor/gates.yml", ".supervisor/gates.toml"} {
		cmd := exec.CommandContext(ctx, "git", "-C", repo, "show", commit+":"+name)
		out, err := cmd.Output()
		if err != nil {
			continue // not in that commit
		}
		if !trusted {
			fmt.Fprintf(warn, "coordinator: ignoring %s: project gates run commands the repository chose; pass --trust-project-gates to use them\n", name)
			return nil, nil
		}
		return &api.GateFile{Filename: filepath.Join(repo, name), Content: string(out)}, nil
	}
	return nil, nil
}

// registryGates fetches the fleet's registry gates from the coordinator,
// the gate source between the user file and the project, so a workflow
// naming one validates here as it will there. It is only asked when the
// local validation failed on an unknown gate (invalid), and gives nil if
// the coordinator cannot say: the server validates every submission anyway.
func (e *env) registryGates(ctx context.Context, invalid error) *gates.Set {
	var ve *gates.ValidationError
	if !errors.As(invalid, &ve) {
		return nil
	}
	unknownGate := false
	for _, p := range ve.Problems {
		if strings.Contains(p.Message, "unknown gate") || strings.Contains(p.Message, "no built-in, user or project gate defines") {
			unknownGate = true
		}
	}
	if !unknownGate {
		return nil
	}
	nc, client, err := e.connect(ctx)
	if err != nil {
		return nil
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
	defer cancel()
	list, err := client.GateList(rctx, api.GateListRequest{})
	if err != nil {
		e.log.Debug("cannot list the registry's gates", "err", err)
		return nil
	}
	set := &gates.Set{}
	for _, info := range list.Gates {
		if info.Source == api.SourceRegistry {
			g := gates.FromSpec(info.Definition)
			g.Source = gates.Source{Origin: gates.OriginUser, File: info.DefinedAt}
			set.Add(g)
		}
	}
	return set
}
