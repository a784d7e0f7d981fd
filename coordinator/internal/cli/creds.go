package cli

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/credentials"
	"github.com/supervisorhq/supervisor/shared/natsauth"
)

func newCreds() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "creds",
		Short: "Generate the fleet's credentials",
	}
	init := &cobra.Command{
		Use:   "init DIR",
		Short: "Write a credentials set: one NATS nkey per role and the nats-server authorization config",
		Long: `creds init writes a new credentials set into DIR (created with mode 0700):
one NATS nkey user per role, each seed in DIR/<role>.nk (mode 0600), and
DIR/` + natsauth.ConfigFile + `, the nats-server authorization block giving each user only
its role's permissions (docs/security.md). It refuses to replace an existing set
unless --force is given: every program and nats-server then need the new files.

Give each program its role's file with --nats-nkey (SUPERVISOR_NATS_NKEY):
coordinator serve coordinator.nk, worker worker.nk, gaterunner gaterunner.nk,
users' commands cli.nk, operators' (approve, merge, breakers reset, gate add …)
operator.nk. Include the config from nats-server's configuration file, or give
DIR to coordinator dev --creds.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			force, _ := cmd.Flags().GetBool("force")
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			files, err := credentials.Generate(dir, force)
			if errors.Is(err, credentials.ErrExists) {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			if err != nil {
				return &ExitError{Code: ExitFault, Err: err}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote a credentials set in %s:\n", dir)
			for _, f := range files {
				what := "nats-server's authorization config (public keys only): include it from the server's config"
				if f.Role != "" {
					what = "the " + string(f.Role) + " role's nkey seed (secret): --nats-nkey of " + usedBy(f.Role)
				}
				fmt.Fprintf(out, "  %-15s %04o  %s\n", filepath.Base(f.Path), f.Mode, what)
			}
			fmt.Fprintf(out, "nats-server: add `include \"%s\"` to its configuration file (the path is relative to that file)\n",
				natsauth.ConfigFile)
			fmt.Fprintf(out, "embedded: coordinator dev --creds %s (then --listen may be any address)\n", dir)
			fmt.Fprintf(out, "each role's permissions: docs/security.md\n")
			return nil
		},
	}
	init.Flags().Bool("force", false, "replace an existing set (every program and nats-server then need the new files)")
	cmd.AddCommand(init)
	return cmd
}

// usedBy names the programs a role's key file is for.
func usedBy(r natsauth.Role) string {
	switch r {
	case natsauth.Coordinator:
		return "coordinator serve"
	case natsauth.Worker:
		return "every worker"
	case natsauth.GateRunner:
		return "every gate runner"
	case natsauth.CLI:
		return "users' coordinator commands (submit, status, watch, logs, cancel …)"
	case natsauth.Operator:
		return "operators' coordinator commands (approve, reject, retry, resume, merge, breakers reset, gate add …)"
	}
	return string(r)
}
