// Command probe is the program the Docker sandbox tests run inside their
// test image (FROM scratch, so it is the only program there; package
// sandboxtest builds the image). Each subcommand checks one property of
// the sandbox and reports on stdout or, for failures, on stderr with exit
// status 1.
package main

import (
	"bufio"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: probe SUBCOMMAND [ARG...]")
	}
	args := os.Args[2:]
	arg := func(i int) string {
		if i >= len(args) {
			fail("missing argument")
		}
		return args[i]
	}
	switch os.Args[1] {
	case "tcp-connect": // HOST:PORT
		conn, err := net.DialTimeout("tcp", arg(0), 2*time.Second)
		if err != nil {
			fail("tcp-connect: %v", err)
		}
		conn.Close()
		fmt.Println("connected")
	case "listen": // ADDR: greet each connection with "hello", until killed
		ln, err := net.Listen("tcp", arg(0))
		if err != nil {
			fail("listen: %v", err)
		}
		fmt.Println("listening")
		for {
			conn, err := ln.Accept()
			if err != nil {
				fail("listen: %v", err)
			}
			fmt.Fprintln(conn, "hello")
			conn.Close()
		}
	case "write": // PATH...: each in turn, stopping at the first failure
		if len(args) == 0 {
			fail("missing argument")
		}
		for _, p := range args {
			if err := os.WriteFile(p, []byte("written by probe\n"), 0o644); err != nil {
				fail("write: %v", err)
			}
			fmt.Println("wrote", p)
		}
	case "write-text": // PATH TEXT: create or truncate PATH, then write TEXT
		if err := os.WriteFile(arg(0), []byte(arg(1)), 0o644); err != nil {
			fail("write-text: %v", err)
		}
		fmt.Println("wrote", arg(0))
	case "append": // PATH TEXT: write TEXT at the end of an existing file, in place
		f, err := os.OpenFile(arg(0), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			fail("append: %v", err)
		}
		if _, err := f.WriteString(arg(1)); err != nil {
			fail("append: %v", err)
		}
		if err := f.Close(); err != nil {
			fail("append: %v", err)
		}
		fmt.Println("appended to", arg(0))
	case "chmod": // PATH MODE (octal)
		mode, err := strconv.ParseUint(arg(1), 8, 32)
		if err != nil {
			fail("chmod: %v", err)
		}
		if err := os.Chmod(arg(0), os.FileMode(mode)); err != nil {
			fail("chmod: %v", err)
		}
		fmt.Println("chmod", arg(0))
	case "cat": // PATH...: each file's content, or "<missing>" for one that does not exist
		for _, p := range args {
			b, err := os.ReadFile(p)
			switch {
			case errors.Is(err, os.ErrNotExist):
				fmt.Printf("%s: <missing>\n", p)
			case err != nil:
				fail("cat: %v", err)
			default:
				fmt.Printf("%s: %s\n", p, b)
			}
		}
	case "stdout-hex": // HEX [N]: write the bytes HEX encodes on stdout, as they are, then exit N
		b, err := hex.DecodeString(arg(0))
		if err != nil {
			fail("stdout-hex: %v", err)
		}
		_, _ = os.Stdout.Write(b)
		if len(args) > 1 {
			n, err := strconv.Atoi(args[1])
			if err != nil {
				fail("stdout-hex: %v", err)
			}
			os.Exit(n)
		}
	case "stat": // PATH...: each path's permission bits (octal) and owner, "755 0 /"
		for _, p := range args {
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil {
				fail("stat: %v", err)
			}
			fmt.Printf("%o %d %s\n", st.Mode&0o7777, st.Uid, p)
		}
	case "remove": // PATH
		if err := os.Remove(arg(0)); err != nil {
			fail("remove: %v", err)
		}
		fmt.Println("removed", arg(0))
	case "fork-bomb":
		forkBomb()
	case "alloc": // MB
		mb, err := strconv.Atoi(arg(0))
		if err != nil {
			fail("alloc: %v", err)
		}
		var keep [][]byte
		for i := 0; i < mb; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1 // touch every page so it is really allocated
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep), "MiB")
	case "sleep", "sleep-ignore-term": // DURATION
		if os.Args[1] == "sleep-ignore-term" {
			signal.Ignore(syscall.SIGTERM)
		}
		d, err := time.ParseDuration(arg(0))
		if err != nil {
			fail("sleep: %v", err)
		}
		fmt.Println("sleeping")
		time.Sleep(d)
		fmt.Println("slept")
	case "spawn": // DURATION: start "probe sleep DURATION" in the background, holding this one's output, and exit
		cmd := exec.Command(os.Args[0], "sleep", arg(0))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fail("spawn: %v", err)
		}
		fmt.Println("spawned", cmd.Process.Pid)
	case "child-alloc": // MB: run "probe alloc MB" as a child, report how it ended, and exit 3
		cmd := exec.Command(os.Args[0], "alloc", arg(0))
		err := cmd.Run()
		fmt.Println("child:", err)
		os.Exit(3)
	case "kill-all": // SIGNAL (a number): kill(-1, SIGNAL), then report that this process lives on
		n, err := strconv.Atoi(arg(0))
		if err != nil {
			fail("kill-all: %v", err)
		}
		fmt.Println("kill(-1):", syscall.Kill(-1, syscall.Signal(n)))
		time.Sleep(200 * time.Millisecond)
		fmt.Println("alive")
	case "procs": // the command lines of the other processes it can see, sorted
		entries, err := os.ReadDir("/proc")
		if err != nil {
			fail("procs: %v", err)
		}
		var lines []string
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil {
				continue
			}
			lines = append(lines, strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")))
		}
		sort.Strings(lines)
		for _, l := range lines {
			fmt.Println(l)
		}
	case "netns": // the network namespace ("net:[inode]"), then its interfaces, sorted
		ns, err := os.Readlink("/proc/self/ns/net")
		if err != nil {
			fail("netns: %v", err)
		}
		fmt.Println(ns)
		ents, err := os.ReadDir("/sys/class/net")
		if err != nil {
			fail("interfaces: %v", err)
		}
		for _, e := range ents {
			fmt.Println(e.Name())
		}
	case "resolve": // HOST: its addresses as Go's resolver finds them, sorted
		addrs, err := net.LookupHost(arg(0))
		if err != nil {
			fail("resolve: %v", err)
		}
		sort.Strings(addrs)
		for _, a := range addrs {
			fmt.Println(a)
		}
	case "env":
		env := os.Environ()
		sort.Strings(env)
		for _, kv := range env {
			fmt.Println(kv)
		}
	case "id":
		fmt.Printf("uid=%d gid=%d\n", os.Getuid(), os.Getgid())
	case "pwd":
		wd, err := os.Getwd()
		if err != nil {
			fail("pwd: %v", err)
		}
		fmt.Println(wd)
	case "exit": // N
		n, err := strconv.Atoi(arg(0))
		if err != nil {
			fail("exit: %v", err)
		}
		fmt.Fprintln(os.Stderr, "exiting with", n)
		os.Exit(n)
	case "print-lines": // N [stdout|stderr|both]
		n, err := strconv.Atoi(arg(0))
		if err != nil {
			fail("print-lines: %v", err)
		}
		stream := "stdout"
		if len(args) > 1 {
			stream = args[1]
		}
		out := bufio.NewWriter(os.Stdout)
		errw := bufio.NewWriter(os.Stderr)
		for i := 1; i <= n; i++ {
			if stream == "stdout" || stream == "both" {
				fmt.Fprintf(out, "out %d\n", i)
			}
			if stream == "stderr" || stream == "both" {
				fmt.Fprintf(errw, "err %d\n", i)
			}
		}
		out.Flush()
		errw.Flush()
	case "https-get": // URL: through HTTPS_PROXY (test servers: no verification)
		httpsGet(arg(0))
	case "cat-env": // NAME: print the file whose path is in $NAME
		data, err := os.ReadFile(os.Getenv(arg(0)))
		if err != nil {
			fail("cat-env: %v", err)
		}
		os.Stdout.Write(data)
	case "read-stdin":
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			fail("read-stdin: %v", err)
		}
	default:
		fail("unknown subcommand %q", os.Args[1])
	}
}

// forkBomb starts copies of itself, each of which does the same, until
// starting one fails. The first process then reports the failure and exits
// 3, which ends the container. As a guard against bombing a machine whose
// engine ignored the limit, it refuses to start unless its cgroup has a
// pids limit.
func forkBomb() {
	if os.Getenv("PROBE_BOMB_CHILD") == "" {
		limit := pidsLimit()
		if limit == "" || limit == "max" {
			fail("fork-bomb: refusing: no pids limit visible (%q)", limit)
		}
		fmt.Println("pids limit", limit)
	}
	self, err := os.Executable()
	if err != nil {
		fail("fork-bomb: %v", err)
	}
	started := 0
	for {
		cmd := exec.Command(self, "fork-bomb")
		cmd.Env = append(os.Environ(), "PROBE_BOMB_CHILD=1")
		if err := cmd.Start(); err != nil {
			if os.Getenv("PROBE_BOMB_CHILD") != "" {
				time.Sleep(time.Hour) // hold on to the pid
			}
			fmt.Printf("contained after %d children: %v\n", started, err)
			os.Exit(3)
		}
		started++
	}
}

func pidsLimit() string {
	for _, p := range []string{"/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"} {
		if b, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(b))
		} else if !errors.Is(err, os.ErrNotExist) {
			return ""
		}
	}
	return ""
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	os.Exit(1)
}

// httpsGet fetches url with the proxy the environment names (HTTPS_PROXY,
// NO_PROXY), without verifying the server's certificate (the tests' servers
// have throw-away ones), and prints the status and body.
func httpsGet(url string) {
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:           http.ProxyFromEnvironment,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test servers only
		},
	}
	resp, err := client.Get(url)
	if err != nil {
		fail("https-get: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		fail("https-get: %v", err)
	}
	fmt.Printf("%d %s\n", resp.StatusCode, body)
}
