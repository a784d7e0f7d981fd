// Command coordinator is Supervisor's coordinator service (serve), its
// embedded single-process default (dev, demo), the command line users
// drive it with (submit, status, watch, logs, cancel, gate). Run
// `coordinator --help` for the commands.
package main

import (
	"os"

	"github.com/supervisorhq/supervisor/coordinator/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
