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
//	supervisor-sandbox-helper kill
//	    Run with exec as the job's user once its command has ended: sends
//	    SIGKILL to every process of that user in the container and waits,
//	    at most 5 s, until none is left but zombies (exit status 1 if some
//	    are). The job cannot have processes of another user: it has no
//	    capabilities and no-new-privileges.
//
// It must be a static binary (CGO_ENABLED=0): it runs in images that may
// have no C library at all. It imports nothing but the standard library,
// so it stays small.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
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
	case len(args) == 1 && args[0] == "kill":
		if err := syscall.Kill(-1, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			fmt.Fprintf(os.Stderr, "supervisor-sandbox-helper: kill(-1, SIGKILL): %v\n", err)
			return 1
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			left := alive()
			if left == 0 {
				return 0
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "supervisor-sandbox-helper: %d process(es) still alive after SIGKILL\n", left)
				return 1
			}
		}
	}
	fmt.Fprintln(os.Stderr, "usage: supervisor-sandbox-helper idle | signal | kill")
	return 2
}

// alive counts the processes of this process's user, other than itself,
// that are not zombies.
func alive() int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	uid, self, n := os.Getuid(), os.Getpid(), 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue // gone meanwhile
		}
		var state string
		owner := -1
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				state = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					owner, _ = strconv.Atoi(f[0])
				}
			}
		}
		if owner == uid && !strings.HasPrefix(state, "Z") && !strings.HasPrefix(state, "X") {
			n++
		}
	}
	return n
}
