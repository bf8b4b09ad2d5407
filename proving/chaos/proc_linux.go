package chaos

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// procAttr puts a child in its own process group and has the kernel kill it
// when the run dies, so nothing outlives a crashed run.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// childPIDs lists the processes whose parent is pid (a postmaster's server
// processes), from /proc.
func childPIDs(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(child); ok && ppid == pid {
			out = append(out, child)
		}
	}
	return out, nil
}

// processGone reports whether pid has exited: no /proc entry, or a zombie
// nobody reaped yet (an orphan's new parent may never reap it here).
func processGone(pid int) bool {
	_, state, ok := procStat(pid)
	return !ok || state == "Z" || state == "X"
}

// procStat reads the parent pid and the state of pid from /proc/pid/stat.
// The command name (field 2) may hold spaces and parentheses, so the fields
// are counted after its last ')'.
func procStat(pid int) (ppid int, state string, ok bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", false
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(fields[1])
	return ppid, fields[0], err == nil
}
