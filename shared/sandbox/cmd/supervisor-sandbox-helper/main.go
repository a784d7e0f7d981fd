// Command supervisor-sandbox-helper is the first process (PID 1) of the
// containers the Docker sandbox starts ahead of their job
// (sandbox.DockerOptions.Prestart). It is mounted read-only into each such
// container, which runs it as the job's user:
//
//	supervisor-sandbox-helper job
//
// It waits for its job on its standard input: the length in bytes of a
// JSON object, in decimal, on a line of its own, then that object:
// {"argv": [...], "env": ["K=V", ...], "dir": "..."}. It then runs argv
// in dir with its own environment (the image's) overlaid by env and the
// rest of its standard input as the command's, and does what a
// container's init does for a container's command: it passes SIGTERM,
// SIGINT, SIGHUP and SIGQUIT on to the command and reaps every process
// that ends. Once the command has ended it kills every process left in
// the container and reaps them, and exits with the command's status (128
// plus the signal's number if a signal ended it). As the container's
// first process it receives no signal the command's user sends it but
// those it handles (a signal that ends a Go program, such as SIGABRT,
// ends it, and with it the job's own run), and kill(-1) never reaches it.
//
// The command's standard output and error are pipes the helper reads: it
// writes what comes through them on its own standard output as frames (a
// type byte, 'o' for the command's standard output or 'e' for its
// standard error, the length of the data as 4 bytes big-endian, then the
// data), and, once nothing of the job runs and all of it was written, a
// last frame 'x' whose data is the exit status in decimal, unless the
// kernel's OOM killer killed a process of the container during the job
// (or its count cannot be read), which the engine's exit state reports.
// The runner can then return the result without waiting for the engine to
// tear the container down, and nothing the command writes can pass for
// that last frame. The pipes are read for a second at most once the
// command's processes are gone. The helper is not dumpable, so that the
// command, which runs as the same user, can neither trace it nor open its
// standard output through /proc.
//
// A command that cannot be started exits 127 (not found) or 126 (any
// other reason), with no frame and one line on standard error:
//
//	supervisor-sandbox-helper: cannot start "argv0": <reason>
//
// It must be a static binary (CGO_ENABLED=0): it runs in images that may
// have no C library at all. It imports nothing but the standard library,
// so it stays small.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Frame types on the helper's standard output.
const (
	frameStdout = 'o'
	frameStderr = 'e'
	frameExit   = 'x'
)

// frameData bounds one frame's data.
const frameData = 32 << 10

// maxJob bounds the job (its argv and environment).
const maxJob = 16 << 20

// job is what the sandbox sends.
type job struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
}

func main() {
	// Few threads: they count against the container's process limit,
	// which is the job's.
	runtime.GOMAXPROCS(1)
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) != 1 || args[0] != "job" {
		fmt.Fprintln(os.Stderr, "usage: supervisor-sandbox-helper job")
		return 2
	}
	// Not dumpable: the command, as the same user, cannot trace the
	// helper nor open its standard output (/proc/1/fd/1) to write frames
	// of its own.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "supervisor-sandbox-helper: prctl: %v\n", errno)
		return 2
	}
	// Caught, not ignored: an ignored signal would stay ignored in the
	// command. Before the command has started, one ends the helper.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	started := make(chan *os.Process, 1)
	go forward(sigs, started)
	line, err := readJob(os.Stdin, maxJob)
	if err != nil {
		fmt.Fprintf(os.Stderr, "supervisor-sandbox-helper: reading the job: %v\n", err)
		return 2
	}
	var j job
	if err := json.Unmarshal(line, &j); err != nil || len(j.Argv) == 0 {
		fmt.Fprintf(os.Stderr, "supervisor-sandbox-helper: a job needs an argv: %v\n", err)
		return 2
	}
	env := overlay(os.Environ(), j.Env)
	// The helper's own PATH and directory are the command's, so that argv0
	// is found (and a relative one resolved) as a container's command is.
	os.Clearenv()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		_ = os.Setenv(k, v)
	}
	if j.Dir != "" {
		if err := os.Chdir(j.Dir); err != nil {
			return cannotStart(j.Argv[0], err)
		}
	}
	cmd := exec.Command(j.Argv[0], j.Argv[1:]...)
	if errors.Is(cmd.Err, exec.ErrDot) {
		cmd.Err = nil // a container's command finds programs in "." on PATH too
	}
	cmd.Env = env
	// The kernel's OOM kills in the container so far: one during the job
	// (of any of its processes) is the engine's to report.
	oomBefore, oomKnown := oomKills()
	outR, outW, err := os.Pipe()
	if err != nil {
		return cannotStart(j.Argv[0], err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return cannotStart(j.Argv[0], err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, outW, errW
	// A process group of its own, as the init gives a container's command:
	// the command's kill(0) stays among its own processes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return cannotStart(j.Argv[0], err)
	}
	started <- cmd.Process
	// The command's processes hold the pipes' write ends now: the reads
	// end once none of them runs.
	outW.Close()
	errW.Close()
	fw := &frameWriter{w: os.Stdout}
	var copying sync.WaitGroup
	for _, c := range []struct {
		r   *os.File
		typ byte
	}{{outR, frameStdout}, {errR, frameStderr}} {
		copying.Add(1)
		go func() {
			defer copying.Done()
			fw.copyFrom(c.r, c.typ)
		}()
	}
	status, err := reap(cmd.Process.Pid)
	if err != nil {
		// Framed, as the command's standard error: the runner closes the
		// stream on the report, before the helper's own would arrive.
		fw.frame(frameStderr, []byte(fmt.Sprintf("supervisor-sandbox-helper: wait: %v\n", err)))
	}
	killAll()
	// What the pipes still hold comes at once; a write end held out of
	// the container's reach (passed over a socket to a job of another
	// container) must not keep the helper waiting.
	deadline := time.Now().Add(drainTime)
	_ = outR.SetReadDeadline(deadline)
	_ = errR.SetReadDeadline(deadline)
	copying.Wait()
	if oomAfter, ok := oomKills(); oomKnown && ok && oomAfter == oomBefore {
		fw.frame(frameExit, []byte(strconv.Itoa(status)))
	}
	return status
}

// drainTime bounds the reading of the command's pipes once nothing of the
// job runs.
const drainTime = time.Second

// oomKills returns how many processes the kernel's OOM killer has killed
// in the container's memory cgroup (cgroup v2's memory.events, or v1's
// memory.oom_control); ok is false if neither can be read.
func oomKills() (n int64, ok bool) {
	for _, f := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, found := strings.CutPrefix(line, "oom_kill "); found {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// frameWriter writes frames to w, one at a time.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	err error // the first write error: nothing is written after it
}

// frame writes one frame of type typ.
func (f *frameWriter) frame(typ byte, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return
	}
	buf := make([]byte, 5+len(data))
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:5], uint32(len(data)))
	copy(buf[5:], data)
	_, f.err = f.w.Write(buf)
}

// copyFrom writes what r gives as frames of type typ until r ends.
func (f *frameWriter) copyFrom(r io.Reader, typ byte) {
	buf := make([]byte, frameData)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			f.frame(typ, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// killAll kills every other process of the container (as its first
// process, kill(-1) reaches all of them: they are the command's user's)
// and reaps them, until none is left.
func killAll() {
	for {
		_ = syscall.Kill(-1, syscall.SIGKILL)
		reaped := false
		for {
			var ws syscall.WaitStatus
			_, err := syscall.Wait4(-1, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				break // ECHILD: no child left
			}
			reaped = true
		}
		if !reaped {
			return
		}
	}
}

// forward passes the signals of sigs on to the command once it has
// started; one that comes before ends the helper.
func forward(sigs <-chan os.Signal, started <-chan *os.Process) {
	var cmd *os.Process
	for {
		select {
		case cmd = <-started:
		case sig := <-sigs:
			if cmd == nil {
				os.Exit(128 + int(sig.(syscall.Signal)))
			}
			_ = cmd.Signal(sig)
		}
	}
}

// reap waits for every child that ends (as the container's first process,
// orphans are its children too) until the command, whose process is pid,
// has, and returns the command's status (255 with the error if the wait
// failed).
func reap(pid int) (int, error) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 255, err
		case got != pid:
			continue
		case ws.Signaled():
			return 128 + int(ws.Signal()), nil
		default:
			return ws.ExitStatus(), nil
		}
	}
}

// cannotStart reports that argv0 could not be started, with the status a
// shell gives: 127 if it was not found, 126 otherwise.
func cannotStart(argv0 string, err error) int {
	fmt.Fprintf(os.Stderr, "supervisor-sandbox-helper: cannot start %q: %v\n", argv0, err)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

// overlay returns base with the variables of over set, over's winning.
func overlay(base, over []string) []string {
	set := map[string]bool{}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			out = append(out, kv)
		}
	}
	return append(out, over...)
}

// readJob reads the job from f: its length on a line, read a byte at a
// time, then exactly that many bytes, so that nothing after the job is
// consumed: the rest of the input is the command's.
func readJob(f *os.File, limit int) ([]byte, error) {
	n := 0
	b := make([]byte, 1)
	for digits := 0; ; digits++ {
		if _, err := io.ReadFull(f, b); err != nil {
			return nil, fmt.Errorf("no job: %w", err)
		}
		if b[0] == '\n' && digits > 0 {
			break
		}
		if b[0] < '0' || b[0] > '9' || digits >= 9 {
			return nil, errors.New("the job's length is not a number")
		}
		n = n*10 + int(b[0]-'0')
	}
	if n > limit {
		return nil, fmt.Errorf("a job of %d bytes is over the limit of %d", n, limit)
	}
	job := make([]byte, n)
	if _, err := io.ReadFull(f, job); err != nil {
		return nil, fmt.Errorf("the job: %w", err)
	}
	return job, nil
}
