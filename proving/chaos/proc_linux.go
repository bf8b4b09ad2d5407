package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// procAttr puts a child in its own process group and has the kernel kill it
// when the run dies, so nothing outlives a crashed run.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// ownsLocalPort reports whether process pid holds the TCP socket whose
// local port is port (a PostgreSQL backend's client_port names the API
// process on the other end of its connection).
func ownsLocalPort(pid, port int) (bool, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := socketInodes(f, port, inodes); err != nil {
			return false, err
		}
	}
	if len(inodes) == 0 {
		return false, nil
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true, nil
		}
	}
	return false, nil
}

// socketInodes adds the inodes of the sockets in a /proc/net/tcp* table
// whose local port is port.
func socketInodes(table string, port int, into map[string]bool) error {
	f, err := os.Open(table)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 32); err == nil && int(p) == port {
			into[fields[9]] = true
		}
	}
	return sc.Err()
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
