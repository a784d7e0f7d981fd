package sandbox

import (
	"os"
	"syscall"
	"testing"
)

// The sweep's reading of /proc/PID/stat (PERF-47): the fields after the
// command name, whatever that name holds.
func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		line string
		want procInfo
		ok   bool
	}{
		{"42 (sleep) S 1 42 42 0 -1 4194560 ...\n", procInfo{ppid: 1, pgrp: 42, uid: -1}, true},
		{"7 (a) b (c) Z 3 9 9 0\n", procInfo{ppid: 3, pgrp: 9, uid: -1, zombie: true}, true},
		{"8 (x)) X 5 6\n", procInfo{ppid: 5, pgrp: 6, uid: -1, zombie: true}, true},
		{"9 (name with spaces) R 2 3", procInfo{ppid: 2, pgrp: 3, uid: -1}, true},
		{"10 (cut) S 1", procInfo{}, false},
		{"11 (bad) S x 1 1", procInfo{}, false},
		{"no parenthesis S 1 2", procInfo{}, false},
		{"", procInfo{}, false},
	} {
		got, ok := parseStat([]byte(tc.line))
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

// readProc of this process gives its parent and process group, as the
// kernel does.
func TestReadProcSelf(t *testing.T) {
	info, ok := readProc(os.Getpid(), -1)
	if !ok {
		t.Fatal("readProc of this process: not found")
	}
	pgrp := syscall.Getpgrp()
	if info.ppid != os.Getppid() || info.pgrp != pgrp || info.zombie || info.uid != -1 {
		t.Fatalf("readProc(self) = %+v; want ppid %d, pgrp %d, not a zombie, uid -1", info, os.Getppid(), pgrp)
	}
	child, ok := readProc(os.Getpid(), os.Getppid())
	if !ok || child.uid != os.Getuid() {
		t.Fatalf("readProc(self) as a child of its parent: %+v, %v; want uid %d", child, ok, os.Getuid())
	}
	if _, ok := readProc(1<<30, -1); ok {
		t.Fatal("readProc of a pid that does not exist: found")
	}
}
