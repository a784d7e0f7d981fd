package sandbox

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RunMarkerEnv is the variable carrying a run's marker in the environment
// of every command the process sandbox starts. Descendants inherit it,
// which is how a run's processes that left its process group (setsid,
// double-forking daemons) are recognized once the runner adopts them as a
// child subreaper.
const RunMarkerEnv = "SUPERVISOR_SANDBOX_RUN"

// Sweeps of a run's leftovers (see sweepRun).
const (
	sweepRounds = 100
	sweepPause  = 20 * time.Millisecond
)

// runner holds what the process sandbox sets on the whole runner process,
// once, and the registry of runs in progress, shared by every Process of
// the process since adopted orphans come to the process, not to one
// sandbox.
var runner struct {
	once sync.Once
	// subreaper and dumpable are the errors of setting the runner a child
	// subreaper and not dumpable (nil: done).
	subreaper, dumpable error

	// forking is held for reading while a command is between fork and
	// exec (its /proc entry does not show the run's marker yet), and for
	// writing while a sweep looks for leftovers.
	forking sync.RWMutex
	mu      sync.Mutex
	active  map[string]int // marker -> pid of the run's command (0 before start)
}

// setupRunner makes this process a child subreaper (orphans of the
// commands it starts are re-parented to it instead of init, so a run's
// escaped descendants can be found and killed) and not dumpable (other
// processes of its uid can neither read its /proc/PID/environ nor ptrace
// it). Both are process-wide and idempotent.
func setupRunner() {
	runner.once.Do(func() {
		runner.active = make(map[string]int)
		runner.subreaper = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
		runner.dumpable = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	})
}

// ownerTag is what markers of runs of a Process with owner start with
// ("" without an owner): a hash, so that any owner string makes a plain
// token, then the runner's pid, so that a runner never takes the runs of
// a live one for leftovers.
func ownerTag(owner string) string {
	if owner == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:8]) + "-"
}

// newMarker registers a new run and returns its marker: tag, the runner's
// pid and "-" when tag is set, then 32 random hex digits.
func newMarker(tag string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	if tag != "" {
		tag += strconv.Itoa(os.Getpid()) + "-"
	}
	m := tag + hex.EncodeToString(b[:])
	runner.mu.Lock()
	runner.active[m] = 0
	runner.mu.Unlock()
	return m
}

// setRunPid records the pid of the run's command.
func setRunPid(marker string, pid int) {
	runner.mu.Lock()
	runner.active[marker] = pid
	runner.mu.Unlock()
}

// endRun forgets a run.
func endRun(marker string) {
	runner.mu.Lock()
	delete(runner.active, marker)
	runner.mu.Unlock()
}

// procInfo is what a sweep reads of one process.
type procInfo struct {
	ppid, pgrp int
	uid        int
	zombie     bool
}

// readProc reads pid's parent, process group, state and, if its parent is
// self (only the runner's children are judged by their uid), real uid
// (-1 otherwise).
func readProc(pid, self int) (procInfo, bool) {
	var buf [statBufSize]byte
	return readProcInto(strconv.Itoa(pid), self, buf[:])
}

// statBufSize holds /proc/PID/stat up to and past the fields read (the
// command name is at most 64 bytes; pgrp is the fifth field).
const statBufSize = 512

// readProcInto is readProc for the process whose /proc directory is name,
// reading into buf: one open, one read and one close, no allocation,
// since a sweep reads every process of the host.
func readProcInto(name string, self int, buf []byte) (procInfo, bool) {
	n, ok := readSmall("/proc/"+name+"/stat", buf)
	if !ok {
		return procInfo{}, false
	}
	info, ok := parseStat(buf[:n])
	if !ok {
		return procInfo{}, false
	}
	if info.ppid != self {
		return info, true
	}
	if status, err := os.ReadFile("/proc/" + name + "/status"); err == nil {
		for line := range strings.Lines(string(status)) {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				if u := strings.Fields(rest); len(u) > 0 {
					info.uid, _ = strconv.Atoi(u[0])
				}
				break
			}
		}
	}
	return info, true
}

// parseStat reads the state, parent and process group of a process from
// its /proc/PID/stat line; uid is left -1.
func parseStat(stat []byte) (procInfo, bool) {
	// pid (comm) state ppid pgrp ...; comm may contain anything but ')'
	// is searched from the end.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return procInfo{}, false
	}
	state, rest, ok := nextField(stat[i+1:])
	if !ok {
		return procInfo{}, false
	}
	ppid, rest, ok := nextField(rest)
	if !ok {
		return procInfo{}, false
	}
	pgrp, _, ok := nextField(rest)
	if !ok {
		return procInfo{}, false
	}
	info := procInfo{zombie: string(state) == "Z" || string(state) == "X", uid: -1}
	var err1, err2 error
	info.ppid, err1 = strconv.Atoi(string(ppid))
	info.pgrp, err2 = strconv.Atoi(string(pgrp))
	return info, err1 == nil && err2 == nil
}

// nextField returns the first field of b (fields are separated by spaces,
// the line ends with a newline) and what follows it; ok is false when b
// has none.
func nextField(b []byte) (field, rest []byte, ok bool) {
	b = bytes.TrimLeft(b, " \n")
	if len(b) == 0 {
		return nil, nil, false
	}
	if j := bytes.IndexAny(b, " \n"); j >= 0 {
		return b[:j], b[j:], true
	}
	return b, nil, true
}

// readSmall reads the start of a /proc file into buf with one read: the
// files read here are generated whole by the kernel on the first read.
func readSmall(path string, buf []byte) (int, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return n, err == nil && n > 0
	}
}

// markerOf returns the run marker in pid's environment ("" if it has none
// or it cannot be read).
func markerOf(pid int) string {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(RunMarkerEnv+"=")); ok {
			return string(v)
		}
	}
	return ""
}

// allProcs reads every process of the host (of the runner's pid namespace).
func allProcs(self int) map[int]procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return map[int]procInfo{}
	}
	names, _ := d.Readdirnames(-1)
	_ = d.Close()
	out := make(map[int]procInfo, len(names))
	var buf [statBufSize]byte
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if info, ok := readProcInto(name, self, buf[:]); ok {
			out[pid] = info
		}
	}
	return out
}

// sweepRun kills, once the run's command has exited and been reaped, every
// process the run left: those still in its process group, those the
// runner adopted (as child subreaper) that carry the run's marker or, when
// commands run as a sandbox user (runAs non-nil), that run as that user
// and belong to no run in progress, and all their descendants. Adopted
// processes are reaped. It returns the number of processes it killed.
//
// A process that erased the marker from its own environment and runs as
// the runner's uid is not recognized; a process of a run that has no
// subreaper to come back to is found only while in the run's process
// group. These are the limits of the process sandbox (Docker containers
// are killed as a whole).
func sweepRun(marker string, pgid int, runAs *RunAs) int {
	runner.forking.Lock()
	defer runner.forking.Unlock()
	endRun(marker)
	self := os.Getpid()
	killed := map[int]bool{}
	ours := map[int]bool{} // adopted processes this sweep targeted
	for range sweepRounds {
		runner.mu.Lock()
		mains := make(map[int]bool, len(runner.active))
		markers := make(map[string]bool, len(runner.active))
		for m, pid := range runner.active {
			markers[m] = true
			if pid > 0 {
				mains[pid] = true
			}
		}
		runner.mu.Unlock()

		procs := allProcs(self)
		children := map[int][]int{}
		for pid, p := range procs {
			children[p.ppid] = append(children[p.ppid], pid)
		}
		var roots []int
		for pid, p := range procs {
			switch {
			case pid == self || mains[pid]:
			case p.pgrp == pgid:
				roots = append(roots, pid)
			case p.ppid != self:
			case ours[pid]:
				roots = append(roots, pid)
			case p.zombie:
				// Its environment is gone; its uid is still there.
				if runAs != nil && p.uid == int(runAs.UID) {
					roots = append(roots, pid)
				}
			default:
				m := markerOf(pid)
				if m == marker || (runAs != nil && p.uid == int(runAs.UID) && !markers[m]) {
					roots = append(roots, pid)
				}
			}
		}
		targets := map[int]bool{}
		for len(roots) > 0 {
			pid := roots[len(roots)-1]
			roots = roots[:len(roots)-1]
			if targets[pid] {
				continue
			}
			targets[pid] = true
			roots = append(roots, children[pid]...)
		}
		busy := false
		for pid := range targets {
			p := procs[pid]
			if p.ppid == self {
				ours[pid] = true
			}
			if !p.zombie {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed[pid] = true
				}
				busy = true
			}
			if p.ppid == self {
				var ws syscall.WaitStatus
				wpid, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
				if wpid == 0 || errors.Is(err, syscall.EINTR) {
					busy = true // not dead yet: reap it next round
				} else {
					delete(ours, pid)
				}
			}
		}
		if !busy {
			break
		}
		time.Sleep(sweepPause)
	}
	return len(killed)
}

// killLeftovers kills every process of the host whose run marker starts
// with tag and names a runner pid that is no longer alive (or this
// process's own, for no run in progress), reaps those that are this
// process's children, and returns how many it killed. A runner of the
// same tag that is alive keeps its runs: two runners of one identity are
// a misconfiguration, not a restart.
func killLeftovers(tag string) int {
	runner.forking.Lock()
	defer runner.forking.Unlock()
	runner.mu.Lock()
	active := make(map[string]bool, len(runner.active))
	for m := range runner.active {
		active[m] = true
	}
	runner.mu.Unlock()
	self := os.Getpid()
	killed := 0
	for pid, p := range allProcs(self) {
		if pid == self || p.zombie {
			continue
		}
		m := markerOf(pid)
		rest, ok := strings.CutPrefix(m, tag)
		if !ok || active[m] {
			continue
		}
		owner, _, _ := strings.Cut(rest, "-")
		if ownerPid, err := strconv.Atoi(owner); err != nil || (ownerPid != self && alive(ownerPid)) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
		if p.ppid == self {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	}
	return killed
}

// alive reports whether a process (not a zombie) has pid.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	info, ok := readProc(pid, -1)
	return ok && !info.zombie
}
