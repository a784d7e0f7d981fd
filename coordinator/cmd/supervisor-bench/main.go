// Command supervisor-bench measures Supervisor against references taken in
// the same run (raw JetStream, git status, plain docker run); `make bench`
// runs it. It is a development tool, kept out of the production binaries.
package main

import (
	"os"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
)

func main() { os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr)) }
