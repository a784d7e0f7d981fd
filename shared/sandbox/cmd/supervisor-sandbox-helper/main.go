// Command supervisor-sandbox-helper runs inside the containers the Docker
// sandbox starts ahead of their job (sandbox.DockerOptions.Prestart). It
// is mounted read-only into each such container and has two modes:
//
//	supervisor-sandbox-helper idle
//	    The container's command (as root, with no capabilities) until its
//	    job arrives: it waits forever, ignoring every signal it can.
//	supervisor-sandbox-helper signal
//	    Run with exec as the job's user: sends SIGTERM to every process of
//	    the container that user may signal (kill(-1, SIGTERM): its own
//	    processes, not the container's init or the idle helper). This is
//	    how a timeout reaches a command that is not the container's first
//	    process.
//
// It must be a static binary (CGO_ENABLED=0): it runs in images that may
// have no C library at all. It imports nothing but the standard library,
// so it stays small.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	switch {
	case len(args) == 1 && args[0] == "idle":
		signal.Ignore()
		for {
			time.Sleep(time.Hour)
		}
	case len(args) == 1 && args[0] == "signal":
		// ESRCH: nothing left to signal.
		if err := syscall.Kill(-1, syscall.SIGTERM); err != nil && err != syscall.ESRCH {
			fmt.Fprintf(os.Stderr, "supervisor-sandbox-helper: kill(-1, SIGTERM): %v\n", err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "usage: supervisor-sandbox-helper idle | signal")
	return 2
}
