package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/tlscreds"
)

func newTLS() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Generate the fleet's TLS certificates and Redis ACL users",
	}
	init := &cobra.Command{
		Use:   "init DIR",
		Short: "Write a CA, NATS and Redis server certificates, a client certificate per role and Redis ACL users",
		Long: `tls init writes into DIR (files 0600, directories 0700; nothing is replaced):

  tls/ca/ca.crt, ca.key               the CA (ca.key issues more: keep it off the servers)
  tls/nats/, tls/redis/               each server's certificate (valid for --hosts) and key, and the CA
  tls/ROLE/                           a client certificate and key per role (` + strings.Join(tlscreds.Roles, ", ") + `), and the CA
  redis/users.acl                     with --redis-acl: Redis's ACL file, a user per service (passwords hashed)
  redis/ROLE.password                 that user's password (coordinator, worker, gaterunner)

Give each program its own directory's files: --nats-ca/--nats-cert/--nats-key
and --redis-ca/--redis-cert/--redis-key, and --redis-password-file with a
rediss://ROLE@HOST:PORT/0 --redis-url. The Redis ACL rules are in docs/security.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hosts, _ := cmd.Flags().GetStringSlice("hosts")
			acl, _ := cmd.Flags().GetBool("redis-acl")
			if len(hosts) == 0 && !acl {
				return &ExitError{Code: ExitUsage, Err: errors.New("nothing to generate: give --hosts (certificates) and/or --redis-acl")}
			}
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			files, err := tlscreds.Generate(dir, tlscreds.Options{Hosts: hosts, RedisACL: acl})
			if errors.Is(err, tlscreds.ErrExists) {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote in %s:\n", dir)
			for _, f := range files {
				rel, err := filepath.Rel(dir, f.Path)
				if err != nil {
					rel = f.Path
				}
				fmt.Fprintf(out, "  %-24s %s\n", rel, f.What)
			}
			return nil
		},
	}
	init.Flags().StringSlice("hosts", nil, "host names and IP addresses NATS and Redis are reached by (the server certificates' names), comma-separated; none: no certificates")
	init.Flags().Bool("redis-acl", false, "also write Redis ACL users, one per service, with random passwords")
	cmd.AddCommand(init)
	return cmd
}
