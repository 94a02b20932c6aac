//go:build linux

// Command toh-vm-guest is PID 1 of the kernel matrix's guest (vm-tests/run-matrix.sh):
// it sets up a minimal system, runs one leg's checks against the real toh-exec and
// toh-mount binaries on the kernel it was booted on, writes one result line per check
// to the second serial port, and powers the machine off.
//
// The leg is chosen by the host on the kernel command line (toh.leg=N); so is anything
// that has to be in force before user space starts (lsm=..., sysctl.user.*). The guest
// asserts that those settings really took effect before it trusts any other result.
//
// # Result lines
//
// Each check is one line on /dev/ttyS1 (the console stays on ttyS0, where kernel
// messages could interleave with it):
//
//	TOH-RESULT|leg=1|kernel=6.1.0-57-amd64|check=ll-ro|expected=...|observed=...|ok
//
// The last field is ok, FAIL or SKIP(reason). A leg ends with
// TOH-DONE|leg=N|checks=K; a missing TOH-DONE line means the guest did not finish and
// the host counts the leg as failed.
//
// # Threat model
//
// None: this is test scaffolding that runs as PID 1 of a throw-away VM. It trusts the
// image it was packed into and the host's kernel command line.
//
// # Platform support
//
// Linux only (it mounts, loads modules and powers off).
//
// # Limitations
//
// A check that hangs is bounded by its command timeout; a hang of the agent itself is
// bounded only by the host's timeout around qemu.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "toh-vm-guest: must run as PID 1 of the test VM")
		os.Exit(2)
	}
	// PID 1 must never return: a panic or an early exit would panic the kernel and
	// lose the results. Whatever happens, report and power off.
	defer poweroff()
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "toh-vm-guest: panic: %v\n%s", p, debug.Stack())
		}
	}()

	if err := setupSystem(); err != nil {
		fmt.Fprintf(os.Stderr, "toh-vm-guest: setup: %v\n", err)
	}
	args := kernelArgs()
	rep := newReporter(args["toh.leg"])
	defer rep.close()
	fmt.Fprintf(os.Stderr, "toh-vm-guest: leg %s on %s\n", rep.leg, rep.kernel)

	if err := setupUser(); err != nil {
		rep.add("guest-setup", "ok", "error: "+err.Error(), false)
		rep.done()
		return
	}
	leg, ok := legs[rep.leg]
	if !ok {
		rep.add("leg", "1..5", rep.leg, false)
		rep.done()
		return
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				rep.add("agent", "no panic", fmt.Sprint(p), false)
			}
		}()
		leg(rep)
	}()
	rep.done()
}

// setupSystem mounts what the checks need: /proc, /sys, securityfs (the active LSM
// list), devtmpfs, private /tmp and /run, and loads the kernel modules packed for this
// kernel (fuse is a module in Debian's 6.1).
func setupSystem() error {
	mounts := []struct{ src, dst, fstype, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"securityfs", "/sys/kernel/security", "securityfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", "mode=0755"},
		{"tmpfs", "/dev/shm", "tmpfs", "mode=1777"},
		{"tmpfs", "/tmp", "tmpfs", "mode=1777"},
		{"tmpfs", "/run", "tmpfs", "mode=0755"},
	}
	var errs []string
	for _, m := range mounts {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if err := unix.Mount(m.src, m.dst, m.fstype, unix.MS_NOSUID, m.data); err != nil && err != unix.EBUSY {
			errs = append(errs, fmt.Sprintf("mount %s on %s: %v", m.fstype, m.dst, err))
		}
	}
	// fusermount3 records mounts in /etc/mtab unless it is a symlink to the kernel's.
	os.Remove("/etc/mtab")
	if err := os.Symlink("/proc/self/mounts", "/etc/mtab"); err != nil {
		errs = append(errs, err.Error())
	}
	if err := loadModules(); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// loadModules inserts, in order, the modules listed in
// /lib/modules/<release>/toh-vm.order (written by the host, dependencies first).
func loadModules() error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fmt.Errorf("uname: %w", err)
	}
	dir := "/lib/modules/" + unix.ByteSliceToString(u.Release[:])
	order, err := os.ReadFile(dir + "/toh-vm.order")
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the module list: %w", err)
	}
	for _, name := range strings.Fields(string(order)) {
		f, err := os.Open(dir + "/" + name)
		if err != nil {
			return fmt.Errorf("opening module %s: %w", name, err)
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("loading module %s: %w", name, err)
		}
	}
	return nil
}

func kernelArgs() map[string]string {
	m := map[string]string{}
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func poweroff() {
	unix.Sync()
	// Give the UART a moment to drain before the machine disappears.
	time.Sleep(200 * time.Millisecond)
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	// Reboot only returns on failure; PID 1 must not exit.
	for {
		time.Sleep(time.Hour)
	}
}
