package sandbox

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dropCapabilities leaves the calling thread, and whatever it execs, without any
// capability. A confined command run by root would otherwise keep them: with
// CAP_SYS_MODULE it could load a kernel module, with CAP_SYS_ADMIN remount, and uid 0
// regains the whole bounding set at every execve unless that set is emptied.
// Must run on the OS thread that will execve.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	euid := os.Geteuid()
	// PR_CAPBSET_DROP needs CAP_SETPCAP in the effective set (the kernel checks it
	// before anything else), so without it each drop below could only fail with
	// EPERM, which a non-root uid ignores anyway: skip the 41 system calls for the
	// common case of an unprivileged caller. Root, or a process holding
	// CAP_SETPCAP, runs the loop, and root still fails closed on EPERM.
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading capabilities: %w", err)
	}
	if euid == 0 || data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		for c := 0; c <= unix.CAP_LAST_CAP; c++ {
			err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
			switch {
			case err == nil, errors.Is(err, unix.EINVAL):
			case errors.Is(err, unix.EPERM) && euid != 0:
				// Without CAP_SETPCAP the bounding set cannot shrink, and need not: a
				// non-root uid gains nothing from it at execve under no_new_privs.
			default:
				return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
			}
		}
	}
	hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("dropping capabilities: %w", err)
	}
	return nil
}
