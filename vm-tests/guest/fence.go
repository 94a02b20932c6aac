//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fenceChecks are the checks fenceAsRoot reports; when toh-mount is not in the image
// each of them is skipped (or failed, when it did not build) with the reason.
var fenceChecks = []struct{ name, expected string }{
	{"fence-mount", "mounted"},
	{"fence-read", "reads pass through"},
	{"fence-deny", "EACCES, file absent in SOURCE"},
	{"fence-allow", "written, lands in SOURCE"},
	{"fence-xattr", "reads the host's trusted.toh"},
	{"fence-caps", "daemon: no CAP_SYS_RESOURCE in any thread; guest root: has it"},
	{"fence-unmount", "toh-mount -u: exit=0, unmounted, daemon exited"},
	{"fence-audit", "exit=0, 1 record names denied.txt"},
}

var fenceUnprivChecks = []struct{ name, expected string }{
	{"fuse-0666-mount", "mounted, reads pass through, toh-mount -u exit=0, now not mounted, daemon exited"},
	{"fuse-0600-mode", "0600"},
	{"fuse-0600-refused", "exit!=0, not mounted, message names /dev/fuse"},
}

// tohMountReady reports whether toh-mount is in the image; otherwise it records every
// check as skipped (not written yet) or failed (it did not build) and returns false.
func tohMountReady(r *reporter, checks []struct{ name, expected string }) bool {
	st := status(mountStatus)
	if st == "built" && exists(tohMount) {
		return true
	}
	for _, c := range checks {
		if strings.HasPrefix(st, "build-failed") {
			r.add(c.name, c.expected, "toh-mount did not build", false)
			r.detail(c.name, st)
		} else {
			r.skip(c.name, c.expected, "toh-mount is not in the tree yet")
		}
	}
	return false
}

// fenceAsRoot mounts SOURCE with a workspace-write policy whose writable root is
// SOURCE/allowed and checks a denied and an allowed write through the mount.
func fenceAsRoot(r *reporter) {
	if !tohMountReady(r, fenceChecks) {
		return
	}
	src, mnt := "/srv/fence/src", "/srv/fence/mnt"
	for _, d := range []string{src + "/allowed", mnt, "/etc/toh-vm"} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(src+"/existing.txt", []byte("through the fence\n"), 0o644)
	pol := "/etc/toh-vm/fence-policy.json"
	const auditLog = "/run/toh-fence-audit.jsonl"
	os.WriteFile(pol, []byte(`{"version": 1, "mode": "workspace-write", "workspaceRoot": "`+src+`/allowed"}`+"\n"), 0o644)

	d := startDaemon(false, "/", tohMount, "--policy", pol, "--audit", auditLog, src, mnt)
	if !d.waitMounted(mnt) {
		r.add("fence-mount", "mounted", "not mounted: "+d.state(), false)
		r.detail("fence-mount", d.stderr.String())
		d.kill()
		return
	}
	r.add("fence-mount", "mounted", "mounted", true)

	b, err := os.ReadFile(mnt + "/existing.txt")
	r.add("fence-read", "reads pass through", errText(err, string(b) == "through the fence\n", "reads pass through"), err == nil && string(b) == "through the fence\n")

	err = os.WriteFile(mnt+"/denied.txt", []byte("x"), 0o644)
	r.add("fence-deny", "EACCES, file absent in SOURCE", fmt.Sprintf("%s, file %s in SOURCE", errnoName(err), presence(src+"/denied.txt")),
		errors.Is(err, syscall.EACCES) && !exists(src+"/denied.txt"))

	err = os.WriteFile(mnt+"/allowed/new.txt", []byte("landed\n"), 0o644)
	got := readTrim(src + "/allowed/new.txt")
	r.add("fence-allow", "written, lands in SOURCE", fmt.Sprintf("%s, SOURCE has %q", errnoName(err), got), err == nil && got == "landed")

	// Xattrs read through the mount are the host's. The kernel asks for one before
	// every write(2) to a file (security.capability, above too); the daemon reads it
	// with getxattrat(2) from Linux 6.13 and through /proc/self/fd before, which is
	// what these kernels exercise.
	const xattrWant = "host value"
	xb := make([]byte, 64)
	xn := 0
	err = syscall.Setxattr(src+"/existing.txt", "trusted.toh", []byte(xattrWant), 0)
	if err == nil {
		xn, err = syscall.Getxattr(mnt+"/existing.txt", "trusted.toh", xb)
	}
	xgot, how := string(xb[:max(xn, 0)]), "read"
	if err != nil {
		how = errnoName(err)
	}
	r.add("fence-xattr", "reads the host's trusted.toh", fmt.Sprintf("%s %q", how, xgot), err == nil && xgot == xattrWant)

	// A root daemon gives up CAP_SYS_RESOURCE (quota and reserved blocks), on every
	// thread, by executing itself again; the guest's root keeps it.
	guest := hasCap("/proc/self/status", capSysResource)
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", d.cmd.Process.Pid))
	holding := 0
	for _, t := range tasks {
		if hasCap(t, capSysResource) {
			holding++
		}
	}
	r.add("fence-caps", "daemon: no CAP_SYS_RESOURCE in any thread; guest root: has it",
		fmt.Sprintf("daemon: CAP_SYS_RESOURCE in %d of %d thread(s); guest root: %s", holding, len(tasks), map[bool]string{true: "has it", false: "lacks it"}[guest]),
		len(tasks) > 0 && holding == 0 && guest)

	res := asRoot(tohMount, "-u", mnt)
	exited := d.waitExit(30 * time.Second)
	mounted := isMounted(mnt)
	r.add("fence-unmount", "toh-mount -u: exit=0, unmounted, daemon exited",
		fmt.Sprintf("toh-mount -u: exit=%d, %s, daemon %s", res.code, mountedText(mounted), exitedText(exited)),
		res.code == 0 && !mounted && exited)
	if res.code != 0 {
		r.detail("fence-unmount", res.stderr)
	}
	d.kill()

	// The denial is in the audit log, queryable by path.
	q := asRoot(tohMount, "audit", auditLog, "--json")
	n := countContaining(q.stdout, `denied.txt`)
	r.add("fence-audit", "exit=0, 1 record names denied.txt", fmt.Sprintf("exit=%d, %d record(s) name denied.txt", q.code, n), q.code == 0 && n == 1)
	if q.code != 0 || n != 1 {
		r.detail("fence-audit", q.stdout+q.stderr)
	}
}

// capSysResource is CAP_SYS_RESOURCE's bit.
const capSysResource = 24

// hasCap reports whether the status file of a task (/proc/PID/status) shows
// capability bit in its permitted or effective set.
func hasCap(status string, bit uint) bool {
	b, err := os.ReadFile(status)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && (f[0] == "CapPrm:" || f[0] == "CapEff:") {
			if v, err := strconv.ParseUint(f[1], 16, 64); err == nil && v&(1<<bit) != 0 {
				return true
			}
		}
	}
	return false
}

// countContaining counts the lines of s that contain sub.
func countContaining(s, sub string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// fenceUnprivileged: as the unprivileged user, toh-mount mounts while /dev/fuse is
// 0666 and fails with a message naming /dev/fuse once it is 0600.
func fenceUnprivileged(r *reporter) {
	if !tohMountReady(r, fenceUnprivChecks) {
		return
	}
	src, mnt := home+"/fsrc", home+"/fmnt"
	for _, d := range []string{src, mnt} {
		os.MkdirAll(d, 0o755)
		os.Chown(d, userID, userID)
	}
	os.WriteFile(src+"/file.txt", []byte("hello\n"), 0o644)

	os.Chmod("/dev/fuse", 0o666)
	d := startDaemon(true, workspace, tohMount, src, mnt)
	mounted := d.waitMounted(mnt)
	read := false
	if mounted {
		// As the user: without allow_other not even root may enter the user's mount.
		res := asUser("cat", mnt+"/file.txt")
		read = res.code == 0 && res.stdout == "hello\n"
	}
	un := asUser(tohMount, "-u", mnt)
	exited := d.waitExit(30 * time.Second)
	readText := "reads pass through"
	if !read {
		readText = "read failed"
	}
	obs := fmt.Sprintf("%s, %s, toh-mount -u exit=%d, now %s, daemon %s", mountedText(mounted), readText, un.code, mountedText(isMounted(mnt)), exitedText(exited))
	ok := mounted && read && un.code == 0 && !isMounted(mnt) && exited
	r.add("fuse-0666-mount", "mounted, reads pass through, toh-mount -u exit=0, now not mounted, daemon exited", obs, ok)
	if !ok {
		r.detail("fuse-0666-mount", d.stderr.String()+un.stderr)
	}
	d.kill()

	os.Chmod("/dev/fuse", 0o600)
	fi, err := os.Stat("/dev/fuse")
	mode := "error"
	if err == nil {
		mode = fmt.Sprintf("%04o", fi.Mode().Perm())
	}
	r.add("fuse-0600-mode", "0600", mode, mode == "0600")

	res := asUser(tohMount, src, mnt)
	msg := firstLine(res.stderr, "/dev/fuse")
	r.add("fuse-0600-refused", "exit!=0, not mounted, message names /dev/fuse",
		fmt.Sprintf("exit=%d, %s, message: %s", res.code, mountedText(isMounted(mnt)), orNone(msg)),
		res.code > 0 && !isMounted(mnt) && msg != "")
	if msg == "" {
		r.detail("fuse-0600-refused", res.stderr)
	}
}

// daemon is a background process (toh-mount in the foreground mode).
type daemon struct {
	cmd    *exec.Cmd
	stderr lockedBuffer
	done   chan struct{}
	err    error
}

// lockedBuffer collects the daemon's output, written by os/exec's copying
// goroutine while the checks read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startDaemon(unprivileged bool, dir string, argv ...string) *daemon {
	d := &daemon{done: make(chan struct{})}
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Dir = dir
	d.cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root", "LANG=C"}
	if unprivileged {
		d.cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "USER=" + userName, "LANG=C"}
		d.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: userID, Gid: userID, Groups: []uint32{}}}
	}
	d.cmd.Stdout, d.cmd.Stderr = &d.stderr, &d.stderr
	if err := d.cmd.Start(); err != nil {
		d.err = err
		close(d.done)
		return d
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	return d
}

// waitMounted polls until mnt is a mount point and the daemon has said it serves
// it, the daemon exits, or 60 s pass. Until the daemon says so, go-fuse may still
// hold a file open on the mount (its poll probe), and toh-mount -u would get EBUSY.
func (d *daemon) waitMounted(mnt string) bool {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if isMounted(mnt) && strings.Contains(d.stderr.String(), "toh-mount: serving ") {
			return true
		}
		select {
		case <-d.done:
			return isMounted(mnt)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

func (d *daemon) waitExit(t time.Duration) bool {
	select {
	case <-d.done:
		return true
	case <-time.After(t):
		return false
	}
}

func (d *daemon) state() string {
	select {
	case <-d.done:
		return fmt.Sprintf("daemon exited (%v)", d.err)
	default:
		return "daemon still running"
	}
}

// kill ends the daemon if it is still running and lazily detaches its mount.
func (d *daemon) kill() {
	select {
	case <-d.done:
	default:
		d.cmd.Process.Signal(syscall.SIGTERM)
		if !d.waitExit(10 * time.Second) {
			d.cmd.Process.Kill()
			d.waitExit(5 * time.Second)
		}
	}
}

func isMounted(mnt string) bool {
	b, _ := os.ReadFile("/proc/self/mounts")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == mnt {
			return true
		}
	}
	return false
}

func errnoName(err error) string {
	var en syscall.Errno
	switch {
	case err == nil:
		return "written"
	case errors.As(err, &en):
		return unixErrName(en)
	default:
		return err.Error()
	}
}

func unixErrName(en syscall.Errno) string {
	switch en {
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	case syscall.EROFS:
		return "EROFS"
	case syscall.ENOTCONN:
		return "ENOTCONN"
	case syscall.EIO:
		return "EIO"
	}
	return fmt.Sprintf("errno %d (%v)", int(en), en)
}

func errText(err error, ok bool, okText string) string {
	switch {
	case err != nil:
		return err.Error()
	case !ok:
		return "content differs"
	}
	return okText
}

func mountedText(m bool) string {
	if m {
		return "mounted"
	}
	return "not mounted"
}

func exitedText(e bool) string {
	if e {
		return "exited"
	}
	return "still running"
}
