//go:build !linux

package chaos

import (
	"errors"
	"syscall"
)

// errNotLinux marks a fault that needs Linux's /proc.
var errNotLinux = errors.New("needs Linux /proc")

// procAttr puts a child in its own process group.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// ownsLocalPort needs /proc; elsewhere the dispatcher kill falls back to a
// failed mark.
func ownsLocalPort(int, int) (bool, error) { return false, errNotLinux }

// childPIDs needs /proc; elsewhere a killed postmaster's server processes
// are left to exit by themselves.
func childPIDs(int) ([]int, error) { return nil, nil }

// processGone needs /proc.
func processGone(int) bool { return true }
