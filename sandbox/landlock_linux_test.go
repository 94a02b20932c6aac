package sandbox

// Real-kernel tests of the Landlock launcher. Landlock and seccomp are irreversible, so
// the launcher always runs in a re-exec'd copy of this test binary
// (TOH_TEST_SUBPROCESS=landlock-launcher, dispatched by TestLandlockHelperProcess),
// which then execs the command under test: bash, coreutils, or this binary again as a
// small "op" tool for the syscalls no shell utility here makes (xattrs, inode flags,
// sockets). Scratch trees live under /var/tmp, never /tmp, which workspace-write
// grants.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
	"golang.org/x/sys/unix"
)

const (
	landlockHelperEnv   = "TOH_TEST_SUBPROCESS"
	landlockHelperValue = "landlock-launcher"
	landlockHelperRun   = "-test.run=^TestLandlockHelperProcess$"
)

// TestLandlockHelperProcess is not a test: in a re-exec'd copy of the test binary it
// becomes the launcher ("launch ARGS...") or the op tool ("op NAME ARGS..."). It exits
// with syscall.Exit, which the testing package does not intercept.
func TestLandlockHelperProcess(t *testing.T) {
	if os.Getenv(landlockHelperEnv) != landlockHelperValue {
		return
	}
	args := os.Args
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[i+1:]
	}
	if len(args) == 0 {
		syscall.Exit(3)
	}
	switch args[0] {
	case "launch":
		syscall.Exit(LandlockLauncherMain(args[1:]))
	case "op":
		syscall.Exit(landlockTestOp(args[1:]))
	}
	syscall.Exit(3)
}

// landlockTestOp performs one syscall-level operation and reports its error on stderr
// the way a coreutils tool would ("OP PATH: permission denied").
func landlockTestOp(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "op: missing arguments")
		return 3
	}
	op, target := args[0], args[1]
	var err error
	switch op {
	case "setxattr":
		err = unix.Setxattr(target, "user.toh", []byte("x"), 0)
	case "removexattr":
		err = unix.Removexattr(target, "user.pre")
	case "setflags": // chattr +d
		var fd int
		if fd, err = unix.Open(target, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			var flags int
			if flags, err = unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS); err == nil {
				err = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, flags|landlockFSNoDumpFL)
			}
			unix.Close(fd)
		}
	case "dial-tcp", "dial-mptcp", "dial-unix":
		d := net.Dialer{Timeout: 5 * time.Second}
		network := "tcp"
		if op == "dial-mptcp" {
			d.SetMultipathTCP(true)
		}
		if op == "dial-unix" {
			network = "unix"
		}
		var c net.Conn
		if c, err = d.Dial(network, target); err == nil {
			c.Close() // the listener counts connections; it reads nothing
		}
	case "send-udp":
		var c net.Conn
		if c, err = net.Dial("udp", target); err == nil {
			_, err = c.Write([]byte("hello"))
			c.Close()
		}
	case "ptrace-seize": // attaches without stopping; the tracee is detached at exit
		var tid int
		if tid, err = strconv.Atoi(target); err == nil {
			err = unix.PtraceSeize(tid)
		}
	case "kill0":
		var pid int
		if pid, err = strconv.Atoi(target); err == nil {
			err = syscall.Kill(pid, 0)
		}
	default:
		err = errors.New("unknown op")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", op, target, err)
		return 1
	}
	return 0
}

// landlockOp is the argv that runs this binary as the op tool.
func landlockOp(op ...string) []string {
	return append([]string{os.Args[0], landlockHelperRun, "--", "op"}, op...)
}

type landlockResult struct {
	stdout, stderr string
	code           int
}

// runLandlock runs the launcher with the given arguments (everything after
// "__landlock-run") and returns what it printed and its exit status.
func runLandlock(t *testing.T, args ...string) landlockResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{landlockHelperRun, "--", "launch"}, args...)...)
	cmd.Env = append(os.Environ(), landlockHelperEnv+"="+landlockHelperValue)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := landlockResult{stdout: stdout.String(), stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr) && exitErr.Exited():
		res.code = exitErr.ExitCode()
	default:
		t.Fatalf("running the launcher %q: %v (stderr %q)", args, err, res.stderr)
	}
	return res
}

// launcherLines returns stderr's lines that start with the launcher's prefix.
func (r landlockResult) launcherLines() []string {
	var out []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, landlockFailurePrefix) {
			out = append(out, l)
		}
	}
	return out
}

// requireLaunchFailure checks the launcher contract for a failure: exit 125 and
// exactly one stderr line, starting "landlock-run: ".
func (r landlockResult) requireLaunchFailure(t *testing.T, mention string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if r.code != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], landlockFailurePrefix) {
		t.Fatalf("want exit 125 and one %q line, got exit %d stderr %q stdout %q", landlockFailurePrefix, r.code, r.stderr, r.stdout)
	}
	if !strings.Contains(lines[0], mention) {
		t.Errorf("failure line %q does not mention %q", lines[0], mention)
	}
	if strings.Contains(strings.ToLower(lines[0]), "partial enforcement") {
		t.Errorf("failure line looks like the notice: %q", lines[0])
	}
}

func requireLandlock(t *testing.T, minABI int) int {
	t.Helper()
	abi := testutil.RequireLandlockABI(t, minABI)
	if got := LandlockABI(); got != abi {
		t.Fatalf("LandlockABI() = %d, testutil says %d", got, abi)
	}
	return abi
}

// landlockScratch returns a fresh directory under /var/tmp (not /tmp, which
// workspace-write grants), removed at the end of the test.
func landlockScratch(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "toh-landlock-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func landlockWriteFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil { // umask-proof
		t.Fatal(err)
	}
}

// landlockSnapshot records everything a file effect could change beneath root: type,
// mode, owner, size, mtime, ctime, content, symlink target, xattrs and inode flags.
// Access times are left out: reads may update them.
func landlockSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d size=%d mtime=%d.%d ctime=%d.%d nlink=%d",
			st.Mode, st.Uid, st.Gid, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, st.Nlink)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err == nil {
				if flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS); err == nil {
					desc += fmt.Sprintf(" flags=%#x", flags)
				}
				unix.Close(fd)
			}
		}
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(p, buf); err == nil {
			names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
			sort.Strings(names)
			for _, name := range names {
				if name == "" {
					continue
				}
				v := make([]byte, 4096)
				m, _ := unix.Lgetxattr(p, name, v)
				desc += fmt.Sprintf(" xattr:%s=%q", name, v[:max(m, 0)])
			}
		}
		rel, _ := filepath.Rel(root, p)
		snap[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot of %s: %v", root, err)
	}
	return snap
}

// landlockFileTree is the per-case fixture: base/ws holds the targets, base/canary
// sits beside it and must never change.
type landlockFileTree struct {
	base, ws, canary string
}

func newLandlockFileTree(t *testing.T) landlockFileTree {
	t.Helper()
	base := landlockScratch(t)
	tr := landlockFileTree{base: base, ws: filepath.Join(base, "ws"), canary: filepath.Join(base, "canary")}
	for _, d := range []string{tr.ws, filepath.Join(tr.ws, "sub"), filepath.Join(tr.ws, "empty")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	landlockWriteFile(t, filepath.Join(tr.ws, "f"), "orig\n")
	landlockWriteFile(t, tr.canary, "canary\n")
	if os.Geteuid() == 0 {
		// The chown case changes the group back to 0: confined commands hold no
		// capability, so even root may only chgrp a file it owns to a group it is in.
		if err := os.Lchown(filepath.Join(tr.ws, "f"), 0, 65534); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Setxattr(filepath.Join(tr.ws, "f"), "user.pre", []byte("1"), 0); err != nil {
		t.Fatalf("this file system needs user xattrs for the tests: %v", err)
	}
	return tr
}

type landlockFileOp struct {
	name   string
	argv   func(ws string) []string
	landed func(t *testing.T, ws string) bool
}

func landlockExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func landlockFileOps() []landlockFileOp {
	sh := func(script string) func(string) []string {
		return func(ws string) []string { return []string{"bash", "-c", script, "bash", ws} }
	}
	op := func(name, file string) func(string) []string {
		return func(ws string) []string { return landlockOp(name, filepath.Join(ws, file)) }
	}
	fileIs := func(want string) func(*testing.T, string) bool {
		return func(t *testing.T, ws string) bool {
			b, err := os.ReadFile(filepath.Join(ws, "f"))
			return err == nil && string(b) == want
		}
	}
	there := func(name string) func(*testing.T, string) bool {
		return func(t *testing.T, ws string) bool { return landlockExists(filepath.Join(ws, name)) }
	}
	gone := func(name string) func(*testing.T, string) bool {
		return func(t *testing.T, ws string) bool { return !landlockExists(filepath.Join(ws, name)) }
	}
	stat := func(ws string) unix.Stat_t {
		var st unix.Stat_t
		unix.Stat(filepath.Join(ws, "f"), &st)
		return st
	}
	chownTo := "0:0" // from 0:65534, see newLandlockFileTree
	return []landlockFileOp{
		{"create", sh(`echo new > "$1/new"`), there("new")},
		{"write", sh(`echo more >> "$1/f"`), fileIs("orig\nmore\n")},
		{"truncate", sh(`truncate -s 0 "$1/f"`), fileIs("")},
		{"unlink", sh(`rm -f "$1/f"`), gone("f")},
		{"rename", sh(`mv "$1/f" "$1/g"`), there("g")},
		{"rename across directories", sh(`mv "$1/f" "$1/sub/f"`), there("sub/f")},
		{"mkdir", sh(`mkdir "$1/d"`), there("d")},
		{"rmdir", sh(`rmdir "$1/empty"`), gone("empty")},
		{"symlink", sh(`ln -s /etc/hostname "$1/sl"`), there("sl")},
		{"hard link", sh(`ln "$1/f" "$1/hl"`), there("hl")},
		{"mkfifo", sh(`mkfifo "$1/fifo"`), there("fifo")},
		{"chmod", sh(`chmod 0600 "$1/f"`), func(t *testing.T, ws string) bool { return stat(ws).Mode&0o777 == 0o600 }},
		{"chown", sh(`chown ` + chownTo + ` "$1/f"`), func(t *testing.T, ws string) bool {
			return fmt.Sprintf("%d:%d", stat(ws).Uid, stat(ws).Gid) == chownTo
		}},
		{"utimes", sh(`touch -m -d @1000000000 "$1/f"`), func(t *testing.T, ws string) bool { return stat(ws).Mtim.Sec == 1000000000 }},
		{"setxattr", op("setxattr", "f"), func(t *testing.T, ws string) bool {
			_, err := unix.Getxattr(filepath.Join(ws, "f"), "user.toh", nil)
			return err == nil
		}},
		{"removexattr", op("removexattr", "f"), func(t *testing.T, ws string) bool {
			_, err := unix.Getxattr(filepath.Join(ws, "f"), "user.pre", nil)
			return errors.Is(err, unix.ENODATA)
		}},
		{"chattr", op("setflags", "f"), func(t *testing.T, ws string) bool {
			fd, err := unix.Open(filepath.Join(ws, "f"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return false
			}
			defer unix.Close(fd)
			flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS)
			return err == nil && flags&landlockFSNoDumpFL != 0
		}},
	}
}

// Every file effect is denied in read-only (negative control: nothing under base
// changed, canary included) and lands under workspace-write with the directory as a
// root (positive control: the same command does work, and the canary beside the root
// is still untouched).
func TestLandlockFileEffects(t *testing.T) { forEachLandlockPath(t, testLandlockFileEffects) }

func testLandlockFileEffects(t *testing.T, run landlockRunner) {
	requireLandlock(t, 1)
	for _, o := range landlockFileOps() {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			if o.name == "chown" && os.Geteuid() != 0 {
				t.Skip("an unprivileged user can only chown a file to itself, which changes nothing observable")
			}
			tr := newLandlockFileTree(t)
			if o.landed(t, tr.ws) {
				t.Fatalf("fixture already shows the effect")
			}
			before := landlockSnapshot(t, tr.base)

			r := run(t, append([]string{"--mode", "read-only", "--"}, o.argv(tr.ws)...)...)
			if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "permission denied") {
				t.Errorf("read-only: want a non-zero exit and %q, got exit %d stderr %q", "permission denied", r.code, r.stderr)
			}
			if len(r.launcherLines()) != 0 {
				t.Errorf("read-only: launcher lines in a confined run: %q", r.launcherLines())
			}
			if diff := cmp.Diff(before, landlockSnapshot(t, tr.base)); diff != "" {
				t.Fatalf("read-only: the denied effect left traces (-before +after):\n%s", diff)
			}

			canary := landlockSnapshot(t, tr.canary)
			r = run(t, append([]string{"--mode", "workspace-write", "--rw", tr.ws, "--"}, o.argv(tr.ws)...)...)
			if r.code != 0 {
				t.Fatalf("workspace-write: exit %d, stderr %q", r.code, r.stderr)
			}
			if !o.landed(t, tr.ws) {
				t.Fatalf("workspace-write: the allowed effect did not land")
			}
			if diff := cmp.Diff(canary, landlockSnapshot(t, tr.canary)); diff != "" {
				t.Fatalf("workspace-write: canary beside the root changed:\n%s", diff)
			}
		})
	}
}

func TestLandlockReadOnlyKeepsReadsAndDevNull(t *testing.T) {
	forEachLandlockPath(t, testLandlockReadOnlyKeepsReadsAndDevNull)
}

func testLandlockReadOnlyKeepsReadsAndDevNull(t *testing.T, run landlockRunner) {
	requireLandlock(t, 1)
	tr := newLandlockFileTree(t)
	before := landlockSnapshot(t, tr.base)
	script := `cat "$1/f" && ls "$1" >/dev/null && echo x > /dev/null && echo y >> /dev/null && : > /dev/null && echo ok`
	r := run(t, "--mode", "read-only", "--", "bash", "-c", script, "bash", tr.ws)
	if r.code != 0 || r.stdout != "orig\nok\n" || r.stderr != "" {
		t.Fatalf("reads and /dev/null: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	// Negative control: a write beside the sink in the same profile is refused.
	r = run(t, "--mode", "read-only", "--", "bash", "-c", `echo x > "$1/new"`, "bash", tr.ws)
	if r.code == 0 || landlockExists(filepath.Join(tr.ws, "new")) {
		t.Fatalf("write under read-only: exit %d stderr %q", r.code, r.stderr)
	}
	// Documented: utimensat is denied everywhere under read-only, /dev/null included.
	r = run(t, "--mode", "read-only", "--", "touch", "/dev/null")
	if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "permission denied") {
		t.Fatalf("touch /dev/null under read-only: exit %d stderr %q", r.code, r.stderr)
	}
	if diff := cmp.Diff(before, landlockSnapshot(t, tr.base)); diff != "" {
		t.Fatalf("read-only run changed the tree:\n%s", diff)
	}
}

func TestLandlockWorkspaceWriteBesideRoot(t *testing.T) {
	forEachLandlockPath(t, testLandlockWorkspaceWriteBesideRoot)
}

func testLandlockWorkspaceWriteBesideRoot(t *testing.T, run landlockRunner) {
	requireLandlock(t, 1)
	tr := newLandlockFileTree(t)
	canary := landlockSnapshot(t, tr.canary)
	beside := filepath.Join(tr.base, "beside")
	script := `echo in > "$1/in"; echo out > "$2"`
	r := run(t, "--mode", "workspace-write", "--rw", tr.ws, "--", "bash", "-c", script, "bash", tr.ws, beside)
	if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "permission denied") {
		t.Errorf("write beside the root: exit %d stderr %q", r.code, r.stderr)
	}
	if landlockExists(beside) {
		t.Errorf("the write beside the root landed")
	}
	if b, err := os.ReadFile(filepath.Join(tr.ws, "in")); err != nil || string(b) != "in\n" {
		t.Errorf("the write under the root did not land: %q %v", b, err)
	}
	if diff := cmp.Diff(canary, landlockSnapshot(t, tr.canary)); diff != "" {
		t.Errorf("canary changed:\n%s", diff)
	}
}

// A write beneath host /dev (here /dev/shm, a world-writable tmpfs) is denied in both
// modes; the same run's write under the root lands.
func TestLandlockDevShmDenied(t *testing.T) { forEachLandlockPath(t, testLandlockDevShmDenied) }

func testLandlockDevShmDenied(t *testing.T, run landlockRunner) {
	requireLandlock(t, 1)
	if !landlockExists("/dev/shm") {
		t.Skip("no /dev/shm on this host")
	}
	tr := newLandlockFileTree(t)
	for _, mode := range []string{"read-only", "workspace-write"} {
		t.Run(mode, func(t *testing.T) {
			shm := fmt.Sprintf("/dev/shm/toh-landlock-test-%d-%s", os.Getpid(), mode)
			t.Cleanup(func() { os.Remove(shm) })
			args := []string{"--mode", mode}
			if mode == "workspace-write" {
				args = append(args, "--rw", tr.ws)
			}
			marker := filepath.Join(tr.ws, "marker-"+mode)
			script := `echo x > "$2"; st=$?; echo in > "$1" 2>/dev/null; exit $st`
			r := run(t, append(args, "--", "bash", "-c", script, "bash", marker, shm)...)
			if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "permission denied") {
				t.Errorf("write to %s: exit %d stderr %q", shm, r.code, r.stderr)
			}
			if landlockExists(shm) {
				t.Errorf("%s was created", shm)
			}
			if wantMarker := mode == "workspace-write"; landlockExists(marker) != wantMarker {
				t.Errorf("marker under the root: exists=%v, want %v", landlockExists(marker), wantMarker)
			}
		})
	}
}

// A rule path that cannot be opened is fatal: exit 125, one launcher line, and the
// command never ran (its marker, which an existing root would have let it write, is
// absent). Positive control: without the bad root the same command writes the marker.
func TestLandlockRulePathMissing(t *testing.T) { forEachLandlockPath(t, testLandlockRulePathMissing) }

func testLandlockRulePathMissing(t *testing.T, run landlockRunner) {
	requireLandlock(t, 1)
	tr := newLandlockFileTree(t)
	marker := filepath.Join(tr.ws, "marker")
	missing := filepath.Join(tr.base, "does-not-exist")
	cmdArgs := []string{"--", "bash", "-c", `echo ran > "$1"`, "bash", marker}

	r := run(t, append([]string{"--mode", "workspace-write", "--rw", tr.ws, "--rw", missing}, cmdArgs...)...)
	r.requireLaunchFailure(t, missing)
	if landlockExists(marker) {
		t.Fatalf("the command ran although a rule path was missing")
	}

	r = run(t, append([]string{"--mode", "workspace-write", "--rw", tr.ws, "--rw", tr.canary}, cmdArgs...)...)
	r.requireLaunchFailure(t, tr.canary) // a root that is a file is no root
	if landlockExists(marker) {
		t.Fatalf("the command ran although a root was a file")
	}

	link := filepath.Join(tr.base, "link")
	if err := os.Symlink(filepath.Join(tr.ws, "sub"), link); err != nil {
		t.Fatal(err)
	}
	r = run(t, append([]string{"--mode", "workspace-write", "--rw", tr.ws, "--rw", link}, cmdArgs...)...)
	r.requireLaunchFailure(t, "symlink") // roots are canonical; a symlink is a swap
	if landlockExists(marker) {
		t.Fatalf("the command ran although a root was a symlink")
	}

	r = run(t, append([]string{"--mode", "workspace-write", "--rw", tr.ws}, cmdArgs...)...)
	if r.code != 0 || !landlockExists(marker) {
		t.Fatalf("positive control: exit %d stderr %q marker=%v", r.code, r.stderr, landlockExists(marker))
	}
}

// landlockNoExec returns an executable file that execve(2) rejects (ENOEXEC), so the
// failure happens after the command was found and the profile applied.
func landlockNoExec(t *testing.T) string {
	t.Helper()
	p := filepath.Join(landlockScratch(t), "noexec")
	if err := os.WriteFile(p, []byte("\x00\x01\x02 not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLandlockLauncherFailures(t *testing.T) { forEachLandlockPath(t, testLandlockLauncherFailures) }

func testLandlockLauncherFailures(t *testing.T, run landlockRunner) {
	requireLandlock(t, landlockFullABI)
	noExec := landlockNoExec(t)
	cases := []struct {
		name    string
		args    []string
		mention string
	}{
		{"command not found", []string{"--mode", "read-only", "--", "toh-no-such-command-4711"}, "toh-no-such-command-4711"},
		{"absolute command missing", []string{"--mode", "read-only", "--", "/nonexistent/toh-cmd"}, "/nonexistent/toh-cmd"},
		{"not executable", []string{"--mode", "read-only", "--", "/etc/hostname"}, "/etc/hostname"},
		{"exec format error", []string{"--mode", "read-only", "--", noExec}, "exec format error"},
		{"unknown flag", []string{"--mode", "read-only", "--bogus", "--", "true"}, "--bogus"},
		{"missing --", []string{"--mode", "read-only", "true"}, `"true"`},
		{"missing mode", []string{"--", "true"}, "--mode"},
		{"danger-full-access", []string{"--mode", "danger-full-access", "--", "true"}, "danger-full-access"},
		{"relative root", []string{"--mode", "workspace-write", "--rw", "rel", "--", "true"}, "rel"},
		{"network deny on ABI 3", []string{"--mode", "read-only", "--net-deny", "--max-abi", "3", "--", "true"}, "ABI 4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.args...)
			r.requireLaunchFailure(t, tc.mention)
			if r.stdout != "" {
				t.Errorf("stdout %q", r.stdout)
			}
		})
	}
}

// After exec the child's status passes through unchanged, 125 included, and a run on a
// full ABI prints nothing of its own.
func TestLandlockExitStatusPassThrough(t *testing.T) {
	forEachLandlockPath(t, testLandlockExitStatusPassThrough)
}

func testLandlockExitStatusPassThrough(t *testing.T, run landlockRunner) {
	requireLandlock(t, landlockFullABI)
	for _, code := range []int{0, 1, 2, 125, 126, 127} {
		r := run(t, "--mode", "read-only", "--", "bash", "-c", fmt.Sprintf("echo out; exit %d", code))
		if r.code != code || r.stdout != "out\n" || r.stderr != "" {
			t.Errorf("exit %d: got exit %d stdout %q stderr %q", code, r.code, r.stdout, r.stderr)
		}
	}
}

func TestLandlockProbe(t *testing.T) {
	abi := requireLandlock(t, 1)
	want := landlockProbePartial
	if abi >= landlockFullABI && landlockSeccompArch.supported() {
		want = landlockProbeFull
	}
	for _, args := range [][]string{{"--probe"}, {"--probe", "--mode", "read-only", "--"}} {
		r := runLandlock(t, args...)
		if r.code != 0 || r.stdout != want+"\n" || r.stderr != "" {
			t.Errorf("probe %q: exit %d stdout %q stderr %q, want %q", args, r.code, r.stdout, r.stderr, want)
		}
	}
	r := runLandlock(t, "--probe", "--max-abi", "4")
	if r.code != 0 || r.stdout != landlockProbePartial+"\n" || r.stderr != "" {
		t.Errorf("probe at ABI 4: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	runLandlock(t, "--probe", "--mode", "workspace-write").requireLaunchFailure(t, "read-only")
	runLandlock(t, "--probe", "--", "true").requireLaunchFailure(t, "command")
}

// On an ABI below 5 a confined run prints exactly the notice, then runs: the ABI is
// lowered with --max-abi, so the old-kernel path runs on this kernel for real.
func TestLandlockPartialNotice(t *testing.T) { forEachLandlockPath(t, testLandlockPartialNotice) }

func testLandlockPartialNotice(t *testing.T, run landlockRunner) {
	requireLandlock(t, 1)
	tr := newLandlockFileTree(t)
	noExec := landlockNoExec(t)
	before := landlockSnapshot(t, tr.base)
	for _, abi := range []string{"1", "2", "3", "4"} {
		t.Run("ABI "+abi, func(t *testing.T) {
			r := run(t, "--mode", "read-only", "--max-abi", abi, "--", "bash", "-c", `cat "$1/f"; exit 7`, "bash", tr.ws)
			if r.code != 7 || r.stdout != "orig\n" || r.stderr != landlockNoticePartial+"\n" {
				t.Errorf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
			}
			// Still confined: the write is denied, the file untouched.
			r = run(t, "--mode", "read-only", "--max-abi", abi, "--", "bash", "-c", `echo x >> "$1/f"`, "bash", tr.ws)
			if r.code == 0 || !strings.HasPrefix(r.stderr, landlockNoticePartial+"\n") ||
				!strings.Contains(strings.ToLower(r.stderr), "permission denied") {
				t.Errorf("write: exit %d stderr %q", r.code, r.stderr)
			}
			// An execve failure after the notice adds exactly one failure line.
			r = run(t, "--mode", "read-only", "--max-abi", abi, "--", noExec)
			lines := r.launcherLines()
			if r.code != 125 || len(lines) != 2 || lines[0] != landlockNoticePartial || !strings.Contains(lines[1], "exec format error") {
				t.Errorf("exec failure: exit %d stderr %q", r.code, r.stderr)
			}
		})
	}
	if diff := cmp.Diff(before, landlockSnapshot(t, tr.base)); diff != "" {
		t.Fatalf("tree changed:\n%s", diff)
	}
	// ABI 1 has no refer right: rename(2) across directories fails with EXDEV even
	// within a root; ABI 2 allows it. (mv would hide this by copying.)
	renameScript := `perl -e 'rename($ARGV[0], $ARGV[1]) or die "rename: $!\n"' "$1/f" "$1/sub/f"`
	r := run(t, "--mode", "workspace-write", "--rw", tr.ws, "--max-abi", "1", "--", "bash", "-c", renameScript, "bash", tr.ws)
	if r.code == 0 || !strings.Contains(r.stderr, "cross-device") || landlockExists(filepath.Join(tr.ws, "sub", "f")) {
		t.Errorf("ABI 1 cross-directory rename: exit %d stderr %q", r.code, r.stderr)
	}
	r = run(t, "--mode", "workspace-write", "--rw", tr.ws, "--max-abi", "2", "--", "bash", "-c", renameScript, "bash", tr.ws)
	if r.code != 0 || !landlockExists(filepath.Join(tr.ws, "sub", "f")) {
		t.Errorf("ABI 2 cross-directory rename: exit %d stderr %q", r.code, r.stderr)
	}
}

// landlockCountingListener accepts TCP connections on 127.0.0.1 and counts them.
func landlockCountingListener(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().String(), accepted
}

func TestLandlockNetworkDeny(t *testing.T) { forEachLandlockPath(t, testLandlockNetworkDeny) }

func testLandlockNetworkDeny(t *testing.T, run landlockRunner) {
	requireLandlock(t, landlockNetABI)
	if !landlockSeccompArch.supported() {
		t.Skip("network deny fails closed on this architecture (no seccomp filter)")
	}
	addr, accepted := landlockCountingListener(t)
	host, port, _ := net.SplitHostPort(addr)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	udpGot := make(chan string, 16)
	go func() {
		buf := make([]byte, 64)
		for {
			n, _, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			udpGot <- string(buf[:n])
		}
	}()

	// Outside the sandbox the listener is reachable.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("positive control outside: %v", err)
	}
	c.Close()
	waitCount := func(want int64) bool {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if accepted.Load() == want {
				return true
			}
		}
		return accepted.Load() == want
	}
	if !waitCount(1) {
		t.Fatalf("outside connection not accepted")
	}

	bashTCP := []string{"bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port)}
	cases := []struct {
		name string
		argv []string
		udp  bool
	}{
		{"bash /dev/tcp", bashTCP, false},
		{"tcp", landlockOp("dial-tcp", addr), false},
		{"mptcp", landlockOp("dial-mptcp", addr), false},
		{"udp", landlockOp("send-udp", udp.LocalAddr().String()), true},
	}
	for _, mode := range []string{"read-only", "workspace-write"} {
		for _, tc := range cases {
			t.Run(mode+" "+tc.name, func(t *testing.T) {
				base := []string{"--mode", mode}
				if mode == "workspace-write" {
					base = append(base, "--rw", landlockScratch(t))
				}
				n := accepted.Load()
				r := run(t, append(append(slices.Clone(base), "--net-deny", "--"), tc.argv...)...)
				if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "permission denied") {
					t.Errorf("denied run: exit %d stderr %q", r.code, r.stderr)
				}
				if tc.udp {
					select {
					case m := <-udpGot:
						t.Errorf("a datagram got out: %q", m)
					case <-time.After(300 * time.Millisecond):
					}
				} else if !waitCount(n) {
					t.Errorf("a connection got out")
				}
				// Positive control: the same command without --net-deny connects.
				r = run(t, append(append(slices.Clone(base), "--"), tc.argv...)...)
				if r.code != 0 {
					t.Fatalf("allowed run: exit %d stderr %q", r.code, r.stderr)
				}
				if tc.udp {
					select {
					case <-udpGot:
					case <-time.After(5 * time.Second):
						t.Errorf("the allowed datagram did not arrive")
					}
				} else if !waitCount(n + 1) {
					t.Errorf("the allowed connection did not arrive (count %d, want %d)", accepted.Load(), n+1)
				}
			})
		}
	}
}

// With --net-deny on ABI >= 6 the command cannot reach abstract unix sockets outside
// the sandbox (bwrap --unshare-net parity); pathname sockets stay reachable.
func TestLandlockNetworkDenyAbstractUnix(t *testing.T) {
	forEachLandlockPath(t, testLandlockNetworkDenyAbstractUnix)
}

func testLandlockNetworkDenyAbstractUnix(t *testing.T, run landlockRunner) {
	requireLandlock(t, 6)
	if !landlockSeccompArch.supported() {
		t.Skip("network deny fails closed on this architecture")
	}
	name := fmt.Sprintf("@toh-landlock-test-%d", os.Getpid())
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	r := run(t, append([]string{"--mode", "read-only", "--net-deny", "--"}, landlockOp("dial-unix", name)...)...)
	if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "operation not permitted") {
		t.Errorf("denied run: exit %d stderr %q", r.code, r.stderr)
	}
	time.Sleep(100 * time.Millisecond)
	if accepted.Load() != 0 {
		t.Errorf("the abstract socket was reached")
	}
	r = run(t, append([]string{"--mode", "read-only", "--"}, landlockOp("dial-unix", name)...)...)
	if r.code != 0 {
		t.Fatalf("allowed run: exit %d stderr %q", r.code, r.stderr)
	}
}

// On ABI >= 6 (with the signal-scope erratum fixed) the command cannot signal processes
// outside the sandbox (bwrap --unshare-pid parity) but can signal its own children.
func TestLandlockSignalScope(t *testing.T) { forEachLandlockPath(t, testLandlockSignalScope) }

func testLandlockSignalScope(t *testing.T, run landlockRunner) {
	requireLandlock(t, 6)
	if landlockErrata()&landlockErratumSignalScope == 0 {
		t.Skip("signal scoping is not used on this kernel (erratum unfixed)")
	}
	outside := exec.Command("sleep", "60")
	if err := outside.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outside.Process.Kill(); outside.Wait() })
	pid := strconv.Itoa(outside.Process.Pid)
	r := run(t, append([]string{"--mode", "read-only", "--"}, landlockOp("kill0", pid)...)...)
	if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "operation not permitted") {
		t.Errorf("signal outside: exit %d stderr %q", r.code, r.stderr)
	}
	if err := outside.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the outside process is gone: %v", err)
	}
	r = run(t, "--mode", "read-only", "--", "bash", "-c", `sleep 30 & kill $! && wait $!; [ $? -eq 143 ]`)
	if r.code != 0 {
		t.Errorf("signal own child: exit %d stderr %q", r.code, r.stderr)
	}
}

// LandlockEnforcement on this machine, next to what the launcher's probe says.
func TestLandlockEnforcement(t *testing.T) {
	abi := requireLandlock(t, 1)
	ro := policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}
	got, err := LandlockEnforcement(ro, abi)
	if err != nil {
		t.Fatal(err)
	}
	r := runLandlock(t, "--probe")
	if (got == EnforcementFull) != (r.stdout == landlockProbeFull+"\n") {
		t.Errorf("LandlockEnforcement says %q, the probe says %q", got, r.stdout)
	}
	ww := policy.Execution{Mode: policy.WorkspaceWrite, Network: policy.NetworkAllow, WritableRoots: []string{"/tmp"}}
	if got, err := LandlockEnforcement(ww, abi); err != nil || got != EnforcementPartial {
		t.Errorf("workspace-write: %q, %v", got, err)
	}
	if _, err := LandlockEnforcement(ro, 0); err == nil {
		t.Errorf("ABI 0 accepted")
	}
}

// landlockFSNoDumpFL is FS_NODUMP_FL ("chattr +d"), which an owner may set without
// privilege.
const landlockFSNoDumpFL = 0x40
