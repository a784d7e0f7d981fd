// Command supervisor-sandbox-helper runs inside the containers the Docker
// sandbox starts ahead of their job (sandbox.DockerOptions.Prestart). It
// is mounted read-only into each such container and has two modes:
//
//	supervisor-sandbox-helper idle
//	    The container's command until its job arrives: it waits forever,
//	    ignoring the termination signals that the next mode sends to every
//	    process of the container, so that it outlives the job's command.
//	supervisor-sandbox-helper signal TERM|KILL
//	    Run with exec as the job's user: sends the signal to every process
//	    of the container it may signal (kill(-1, sig): all but the
//	    container's init and itself). This is how a timeout reaches a
//	    command that is not the container's first process.
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
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
			syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
		for {
			time.Sleep(time.Hour)
		}
	case len(args) == 2 && args[0] == "signal":
		sig, ok := map[string]syscall.Signal{"TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL}[args[1]]
		if !ok {
			break
		}
		// ESRCH: nothing left to signal.
		if err := syscall.Kill(-1, sig); err != nil && err != syscall.ESRCH {
			fmt.Fprintf(os.Stderr, "supervisor-sandbox-helper: kill(-1, %s): %v\n", args[1], err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "usage: supervisor-sandbox-helper idle | signal TERM|KILL")
	return 2
}
