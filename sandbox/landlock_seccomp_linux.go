package sandbox

// The seccomp half of the Landlock rung: a classic BPF filter, assembled by hand, that
// closes what Landlock does not govern (see landlock_launcher.go). It is installed on
// the launcher's thread after no_new_privs and before execve, and is inherited by the
// command and everything it spawns.

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompPlan says which parts of the filter a run needs.
type seccompPlan struct {
	// base is the part every Landlock run gets where the architecture has a filter:
	// io_uring refused, and changing another process's resource limits. A same-uid
	// command outside any PID namespace could otherwise set the CPU or file limit of
	// toh-exec or of the fence host, its parent, and kill it or its cleanup, and a
	// dead fence host reads as "the command did not run" (found by review; before,
	// workspace-write with the network allowed ran with no filter at all).
	base bool
	// metadata denies chmod/chown/utimes/xattr/inode-flag changes (read-only mode).
	metadata bool
	// net denies every socket that is not AF_UNIX (network deny).
	net bool
	// vsockOnly is the bwrap rung's filter for network deny instead (see
	// startFiltered): only AF_VSOCK sockets, which no network namespace confines,
	// and io_uring, whose SOCKET operation would bypass the filter, are refused.
	// The other fields are ignored.
	vsockOnly bool
}

func (s seccompPlan) any() bool { return s.base || s.metadata || s.net }

func (s seccompPlan) String() string {
	var parts []string
	if s.metadata {
		parts = append(parts, "metadata")
	}
	if s.net {
		parts = append(parts, "non-unix sockets")
	}
	if len(parts) == 0 && !s.base {
		return "none"
	}
	return strings.Join(append(parts, "io_uring", "others' rlimits"), "+")
}

// seccompArch is one architecture's half of the filter. The zero value means the
// architecture has no filter (the run is partial, and network deny fails closed).
type seccompArch struct {
	auditArch uint32   // AUDIT_ARCH_* of native syscalls
	x32Bit    uint32   // syscall-number bit of a second ABI on the same audit arch, or 0
	metadata  []uint32 // syscalls that change metadata
	ioctl     uint32
	socket    uint32
	ioUring   []uint32
	prlimit   uint32 // prlimit64
}

func (a seccompArch) supported() bool { return a.auditArch != 0 }

// seccompDeniedIoctls change inode state through a file descriptor that may be opened
// read-only (chattr, project quotas, i_generation, fs-verity, encryption policy, the
// file system label). The values use the generic _IOC encoding of amd64 and arm64; the
// 32-bit variants are listed too because some file systems accept them natively.
var seccompDeniedIoctls = []uint32{
	0x40086602, // FS_IOC_SETFLAGS
	0x40046602, // FS_IOC32_SETFLAGS
	0x401c5820, // FS_IOC_FSSETXATTR
	0x40087602, // FS_IOC_SETVERSION
	0x40047602, // FS_IOC32_SETVERSION
	0x40086604, // EXT4_IOC_SETVERSION
	0x40046604, // EXT4_IOC32_SETVERSION
	0x40806685, // FS_IOC_ENABLE_VERITY
	0x800c6613, // FS_IOC_SET_ENCRYPTION_POLICY
	0x41009432, // FS_IOC_SETFSLABEL
}

// Offsets into struct seccomp_data. Arguments are 64-bit; the filter compares their
// low 32 bits, which is what the kernel uses for the int/unsigned int arguments it
// filters (socket's domain, ioctl's cmd), so set high bits cannot dodge it. Both
// supported architectures are little-endian.
const (
	seccompDataNr      = 0
	seccompDataArch    = 4
	seccompDataArgsLow = 16 // + 8*i
)

func bpfStmt(code uint16, k uint32) unix.SockFilter {
	return unix.SockFilter{Code: code, K: k}
}

func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

const (
	bpfLoadWord = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJEq      = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJSet     = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfJGe      = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfRet      = unix.BPF_RET | unix.BPF_K

	seccompKill  = unix.SECCOMP_RET_KILL_PROCESS
	seccompAllow = unix.SECCOMP_RET_ALLOW
)

func seccompErrno(e unix.Errno) uint32 {
	return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA
}

// buildSeccompFilter assembles the filter for a: the architecture checks, then a
// binary search on the syscall number down to the few numbers with a rule of their own
// (seccompRules), whose blocks each end in a return; every other number is allowed.
//
// Why a search and not one comparison per number in a row: installing a filter, the
// kernel works out for each of the ~450 syscall numbers whether the filter allows it
// whatever its arguments (the seccomp action cache), by running the filter up to the
// first argument load, so its cost grows with the instructions an allowed number
// passes: 150-200 µs on every Landlock run for the 60-odd comparisons of the row this
// replaced, a third of the rung's own setup (measured on the 2-vCPU VMs toh is
// benchmarked on; a 2-instruction filter installs in 14 µs). The search passes about
// a dozen. The decisions are the row's, for every number and argument
// (TestSeccompFilterMatchesReference keeps the row as the reference).
func buildSeccompFilter(a seccompArch, s seccompPlan) []unix.SockFilter {
	prog := []unix.SockFilter{
		bpfStmt(bpfLoadWord, seccompDataArch),
		bpfJump(bpfJEq, a.auditArch, 1, 0),
		bpfStmt(bpfRet, seccompKill),
		bpfStmt(bpfLoadWord, seccompDataNr),
	}
	if a.x32Bit != 0 {
		prog = append(prog, bpfJump(bpfJSet, a.x32Bit, 0, 1), bpfStmt(bpfRet, seccompKill))
	}
	return append(prog, seccompSearch(seccompRules(a, s))...)
}

// seccompRule is what the filter does for one syscall number: body runs with the
// number in the accumulator and ends in a return.
type seccompRule struct {
	nr   uint32
	body []unix.SockFilter
}

// seccompRules lists the numbers with a rule for plan s, sorted; where a number is
// listed twice the first rule stands.
func seccompRules(a seccompArch, s seccompPlan) []seccompRule {
	var rules []seccompRule
	ret := func(nr uint32, action uint32) {
		rules = append(rules, seccompRule{nr, []unix.SockFilter{bpfStmt(bpfRet, action)}})
	}
	// io_uring's SETXATTR and SOCKET operations would bypass the syscall filter.
	// ENOSYS, not EACCES: runtimes that probe for io_uring fall back quietly.
	for _, nr := range a.ioUring {
		ret(nr, seccompErrno(unix.ENOSYS))
	}
	if s.vsockOnly {
		rules = append(rules, seccompRule{a.socket, []unix.SockFilter{
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*0),
			bpfJump(bpfJEq, unix.AF_VSOCK, 0, 1),
			bpfStmt(bpfRet, seccompErrno(unix.EACCES)),
			bpfStmt(bpfRet, seccompAllow),
		}})
		return sortSeccompRules(rules)
	}
	// prlimit64 changing another process's limits (pid not 0, new limit not NULL):
	// Landlock governs none of it, and a same-uid command could set toh-exec's, or
	// the fence daemon's, address-space limit and kill it before it reports. Its
	// own limits (pid 0, what setrlimit(2) sends) and reading any stay allowed.
	if a.prlimit != 0 {
		rules = append(rules, seccompRule{a.prlimit, []unix.SockFilter{
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*0), // pid (the kernel reads an int)
			bpfJump(bpfJEq, 0, 4, 0),
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*2), // new_limit, low half
			bpfJump(bpfJEq, 0, 0, 3),
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*2+4), // and high half
			bpfJump(bpfJEq, 0, 0, 1),
			bpfStmt(bpfRet, seccompAllow),
			bpfStmt(bpfRet, seccompErrno(unix.EPERM)),
		}})
	}
	if s.metadata {
		for _, nr := range a.metadata {
			ret(nr, seccompErrno(unix.EACCES))
		}
		body := []unix.SockFilter{bpfStmt(bpfLoadWord, seccompDataArgsLow+8*1)}
		for _, cmd := range seccompDeniedIoctls {
			body = append(body, bpfJump(bpfJEq, cmd, 0, 1), bpfStmt(bpfRet, seccompErrno(unix.EACCES)))
		}
		body = append(body, bpfStmt(bpfRet, seccompAllow))
		rules = append(rules, seccompRule{a.ioctl, body})
	}
	if s.net {
		rules = append(rules, seccompRule{a.socket, []unix.SockFilter{
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*0),
			bpfJump(bpfJEq, unix.AF_UNIX, 0, 1),
			bpfStmt(bpfRet, seccompAllow),
			bpfStmt(bpfRet, seccompErrno(unix.EACCES)),
		}})
	}
	return sortSeccompRules(rules)
}

func sortSeccompRules(rules []seccompRule) []seccompRule {
	slices.SortStableFunc(rules, func(x, y seccompRule) int { return cmp.Compare(x.nr, y.nr) })
	return slices.CompactFunc(rules, func(x, y seccompRule) bool { return x.nr == y.nr })
}

// seccompSearch emits a search of rules (sorted, distinct numbers) on the number in
// the accumulator: a "jump if greater or equal" on the middle number splits them
// until at most three are left, which are compared one by one; a number with no rule
// is allowed. The blocks end in returns, so nothing falls from one part into the next.
func seccompSearch(rules []seccompRule) []unix.SockFilter {
	if len(rules) <= 3 {
		var prog []unix.SockFilter
		for _, r := range rules {
			prog = append(prog, bpfJump(bpfJEq, r.nr, 0, jumpOffset(len(r.body))))
			prog = append(prog, r.body...)
		}
		return append(prog, bpfStmt(bpfRet, seccompAllow))
	}
	mid := len(rules) / 2
	below, above := seccompSearch(rules[:mid]), seccompSearch(rules[mid:])
	prog := []unix.SockFilter{bpfJump(bpfJGe, rules[mid].nr, jumpOffset(len(below)), 0)}
	prog = append(prog, below...)
	return append(prog, above...)
}

// jumpOffset is n as a conditional jump's 8-bit offset. The rules are a fixed list
// whose blocks are far shorter; TestLandlockSeccompFilter builds every plan.
func jumpOffset(n int) uint8 {
	if n > 255 {
		panic(fmt.Sprintf("seccomp filter: a jump over %d instructions", n))
	}
	return uint8(n)
}

// installSeccomp installs the filter on the calling thread, which must already have
// no_new_privs set.
func installSeccomp(s seccompPlan) error {
	a := landlockSeccompArch
	if !a.supported() {
		return fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	prog := buildSeccompFilter(a, s)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := unix.Syscall6(unix.SYS_PRCTL, unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER,
		uintptr(unsafe.Pointer(&fprog)), 0, 0, 0)
	runtime.KeepAlive(prog)
	runtime.KeepAlive(&fprog)
	if errno != 0 {
		return fmt.Errorf("installing the seccomp filter: %w", errno)
	}
	return nil
}
