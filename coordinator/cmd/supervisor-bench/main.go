// Command supervisor-bench measures Supervisor against references taken in
// the same run (raw JetStream, git status, plain docker run); `make bench`
// runs `coordinator bench`, the same command built into the coordinator.
package main

import (
	"os"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
)

func main() { os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr)) }
