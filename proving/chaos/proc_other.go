//go:build !linux

package chaos

import "syscall"

// procAttr puts a child in its own process group.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// childPIDs needs /proc; elsewhere a killed postmaster's server processes
// are left to exit by themselves.
func childPIDs(int) ([]int, error) { return nil, nil }

// processGone needs /proc.
func processGone(int) bool { return true }
