package testutil

// The hostile host: a seccomp filter that makes this Linux look like one where no
// sandbox backend can work, so that fail-closed behaviour is tested against the real
// kernel refusing, not against a stub. Seccomp is irreversible, so the filter is only
// ever installed in a re-exec'd copy of a test binary (TOH_TEST_HOSTILE=1), which then
// execs the program under test; the filter is inherited by it and by everything it
// spawns.
//
// What the filter refuses (amd64 and arm64; anything else skips):
//
//   - landlock_create_ruleset, landlock_add_rule, landlock_restrict_self fail with the
//     chosen errno: ENOSYS is a kernel built without Landlock, EOPNOTSUPP one that has
//     it but was booted with it disabled.
//   - unshare and clone with any namespace flag (CLONE_NEWNS, NEWCGROUP, NEWUTS,
//     NEWIPC, NEWUSER, NEWPID, NEWNET, and NEWTIME for unshare) fail with EPERM, the
//     mask Docker's default profile uses. Refusing only CLONE_NEWUSER is not enough:
//     bwrap run by root creates its mount and PID namespaces directly, without a user
//     namespace.
//   - clone3 fails with ENOSYS: its flags live in memory, which seccomp cannot read;
//     glibc and Go then fall back to clone, whose flags it can.
//   - Everything else, clone without namespace flags (fork, threads, os/exec) included,
//     is allowed. Syscalls of a foreign architecture and x32 syscalls kill the
//     process: the filter could not name them.
//
// setns is left alone: it joins namespaces that already exist, and no backend uses it.

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hostileEnv marks the re-exec'd hostile helper. It is not TOH_TEST_SUBPROCESS
// (STYLE.md's convention) because a package's TestMain may claim every value of that
// variable before any test function runs; a helper dispatched from a test function
// must not depend on that TestMain knowing it.
const hostileEnv = "TOH_TEST_HOSTILE"

// HostileHost is what the hostile host refuses. The zero value refuses nothing: the
// helper still sets no_new_privs and execs the same way, which makes it the control.
type HostileHost struct {
	// LandlockErrno is the answer of every Landlock syscall: unix.ENOSYS (not built
	// in) or unix.EOPNOTSUPP (disabled at boot). 0 leaves Landlock alone.
	LandlockErrno unix.Errno
	// NoNamespaces refuses every namespace-creating clone/unshare (EPERM) and clone3
	// (ENOSYS).
	NoNamespaces bool
	// NoPtrace refuses ptrace(2) with EPERM, as some container seccomp profiles do.
	NoPtrace bool
}

// String is the helper's command-line spelling: "off", or e.g. "landlock=ENOSYS,namespaces=deny".
func (h HostileHost) String() string {
	var parts []string
	switch h.LandlockErrno {
	case 0:
	case unix.EOPNOTSUPP: // ErrnoName says ENOTSUP, the same number on Linux
		parts = append(parts, "landlock=EOPNOTSUPP")
	default:
		parts = append(parts, "landlock="+unix.ErrnoName(h.LandlockErrno))
	}
	if h.NoNamespaces {
		parts = append(parts, "namespaces=deny")
	}
	if h.NoPtrace {
		parts = append(parts, "ptrace=deny")
	}
	if len(parts) == 0 {
		return "off"
	}
	return strings.Join(parts, ",")
}

func parseHostileHost(s string) (HostileHost, error) {
	var h HostileHost
	if s == "off" {
		return h, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		switch part {
		case "landlock=ENOSYS":
			h.LandlockErrno = unix.ENOSYS
		case "landlock=EOPNOTSUPP":
			h.LandlockErrno = unix.EOPNOTSUPP
		case "namespaces=deny":
			h.NoNamespaces = true
		case "ptrace=deny":
			h.NoPtrace = true
		default:
			return h, fmt.Errorf("hostile host: unknown refusal %q", part)
		}
	}
	return h, nil
}

// HostileCommand returns a command that runs argv on host h: a re-exec of this test
// binary that runs only helperTest, whose body must call [HostileHelper].
func HostileCommand(t testing.TB, h HostileHost, helperTest string, argv ...string) *exec.Cmd {
	t.Helper()
	if _, ok := hostileArch(); !ok {
		t.Skipf("no hostile-host seccomp filter for %s", runtime.GOARCH)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("locating the test binary: %v", err)
	}
	cmd := exec.Command(self, append([]string{"-test.run=^" + helperTest + "$", "--", h.String()}, argv...)...)
	cmd.Env = append(os.Environ(), hostileEnv+"=1")
	return cmd
}

// HostileReport is the argv that, run through [HostileCommand], prints what each
// refused syscall answers (one "name=ERRNO" or "name=ok" line each) instead of exec'ing
// a program under test.
var HostileReport = []string{"report"}

// HostileHelper is the body of the helper test named in [HostileCommand]. In the test
// binary proper it returns at once. In the re-exec'd copy it installs the filter and
// execs the program (never returning), or, for [HostileReport], re-execs itself under
// the filter and reports. Its own failures print one "hostile-helper: " line and exit
// 3; it exits with syscall.Exit, which the testing package does not intercept.
func HostileHelper() {
	if os.Getenv(hostileEnv) != "1" {
		return
	}
	args := os.Args
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[i+1:]
	}
	if len(args) == 1 && args[0] == "report-now" {
		hostileReport()
		syscall.Exit(0)
	}
	if len(args) < 2 {
		hostileFatal(fmt.Errorf("want HOST ARGV..., got %q", args))
	}
	h, err := parseHostileHost(args[0])
	if err != nil {
		hostileFatal(err)
	}
	argv := args[1:]
	if slices.Equal(argv, HostileReport) {
		// Report from a fresh process: exec leaves one thread, which carries the
		// filter, so every thread the report's syscalls may run on is filtered.
		self, err := os.Executable()
		if err != nil {
			hostileFatal(err)
		}
		run := slices.IndexFunc(os.Args, func(a string) bool { return strings.HasPrefix(a, "-test.run=") })
		if run < 0 {
			hostileFatal(fmt.Errorf("no -test.run in %q", os.Args))
		}
		argv = []string{self, os.Args[run], "--", "report-now"}
	}
	hostileFatal(h.exec(argv))
}

func hostileFatal(err error) {
	fmt.Fprintf(os.Stderr, "hostile-helper: %v\n", err)
	syscall.Exit(3)
}

// exec installs h's filter on this thread and replaces the process with argv. It
// returns only on failure.
func (h HostileHost) exec(argv []string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	// The filter applies to the calling thread, which must be the one that calls
	// execve; execve then leaves only that thread.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	if h != (HostileHost{}) {
		prog, err := hostileFilter(h)
		if err != nil {
			return err
		}
		fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
		_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
		runtime.KeepAlive(prog)
		if errno != 0 {
			return fmt.Errorf("installing the hostile-host seccomp filter: %w", errno)
		}
	}
	err = syscall.Exec(path, argv, os.Environ())
	return fmt.Errorf("executing %q: %w", path, err)
}

// Namespace flags of clone(2) and unshare(2). CLONE_NEWTIME (0x80) shares its bit with
// clone's exit signal, so only unshare can ask for it that way.
const (
	hostileNSMask    = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	hostileNSUnshare = hostileNSMask | unix.CLONE_NEWTIME
)

// hostileArch returns the audit arch of native syscalls on this architecture.
func hostileArch() (uint32, bool) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, true
	}
	return 0, false
}

// hostileFilter assembles the classic BPF program, in the style of the Landlock rung's
// filter (sandbox/landlock_seccomp_linux.go). Every jump skips a fixed, short block.
func hostileFilter(h HostileHost) ([]unix.SockFilter, error) {
	arch, ok := hostileArch()
	if !ok {
		return nil, fmt.Errorf("no hostile-host filter for %s", runtime.GOARCH)
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K

		// Offsets into struct seccomp_data. The low half of args[0] is at 16 on
		// little-endian amd64 and arm64. The kernel reads clone's flags as 32 bits
		// (lower_32_bits) and unshare rejects any high bit with EINVAL, so set high
		// bits cannot dodge the test.
		offNr, offArch, offArg0 = 0, 4, 16
	)
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA }

	prog := []unix.SockFilter{
		stmt(ld, offArch),
		jump(jeq, arch, 1, 0),
		stmt(ret, unix.SECCOMP_RET_KILL_PROCESS),
		stmt(ld, offNr),
	}
	if runtime.GOARCH == "amd64" {
		const x32SyscallBit = 0x40000000
		prog = append(prog, jump(jset, x32SyscallBit, 0, 1), stmt(ret, unix.SECCOMP_RET_KILL_PROCESS))
	}
	refuse := func(nr uint32, e unix.Errno) {
		prog = append(prog, jump(jeq, nr, 0, 1), stmt(ret, errno(e)))
	}
	// refuseFlags: if nr == syscall { if args[0] & mask { EPERM } else { allow } }.
	refuseFlags := func(nr, mask uint32) {
		prog = append(prog,
			jump(jeq, nr, 0, 4),
			stmt(ld, offArg0),
			jump(jset, mask, 0, 1),
			stmt(ret, errno(unix.EPERM)),
			stmt(ret, unix.SECCOMP_RET_ALLOW),
		)
	}
	if h.LandlockErrno != 0 {
		refuse(unix.SYS_LANDLOCK_CREATE_RULESET, h.LandlockErrno)
		refuse(unix.SYS_LANDLOCK_ADD_RULE, h.LandlockErrno)
		refuse(unix.SYS_LANDLOCK_RESTRICT_SELF, h.LandlockErrno)
	}
	if h.NoNamespaces {
		refuse(unix.SYS_CLONE3, unix.ENOSYS)
		refuseFlags(unix.SYS_UNSHARE, hostileNSUnshare)
		refuseFlags(unix.SYS_CLONE, hostileNSMask)
	}
	if h.NoPtrace {
		refuse(unix.SYS_PTRACE, unix.EPERM)
	}
	return append(prog, stmt(ret, unix.SECCOMP_RET_ALLOW)), nil
}

// hostileReport prints what each syscall the filter governs answers here. None of
// the calls can change anything even without the filter: each carries an argument the
// kernel rejects (EINVAL) before acting, after seccomp has had its say — a bad fd for
// Landlock, CLONE_PARENT (which unshare does not know) beside a namespace flag,
// CLONE_FS beside a new user or mount namespace for clone, a too-small clone_args for
// clone3.
func hostileReport() {
	answer := func(name string, errno unix.Errno) {
		v := "ok"
		if errno != 0 {
			v = unix.ErrnoName(errno)
		}
		fmt.Printf("%s=%s\n", name, v)
	}
	_, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	answer("landlock_create_ruleset", e)
	_, _, e = unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, ^uintptr(0), unix.LANDLOCK_RULE_PATH_BENEATH, 0, 0, 0, 0)
	answer("landlock_add_rule", e)
	_, _, e = unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, ^uintptr(0), 0, 0)
	answer("landlock_restrict_self", e)
	_, _, e = unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER|unix.CLONE_PARENT, 0, 0)
	answer("unshare_newuser", e)
	_, _, e = unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWNS|unix.CLONE_PARENT, 0, 0)
	answer("unshare_newns", e)
	_, _, e = unix.RawSyscall(unix.SYS_UNSHARE, 0, 0, 0)
	answer("unshare_none", e)
	_, _, e = unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS, 0, 0, 0, 0, 0)
	answer("clone_newuser", e)
	_, _, e = unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWNS|unix.CLONE_FS, 0, 0, 0, 0, 0)
	answer("clone_newns", e)
	_, _, e = unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
	answer("clone3", e)
	// A plain fork and exec still work: the host is hostile to sandboxes, not to
	// commands.
	if err := exec.Command("/bin/sh", "-c", "exit 0").Run(); err != nil {
		fmt.Printf("exec=%v\n", err)
	} else {
		fmt.Println("exec=ok")
	}
}
