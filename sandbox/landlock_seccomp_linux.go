package sandbox

// The seccomp half of the Landlock rung: a classic BPF filter, assembled by hand, that
// closes what Landlock does not govern (see landlock_launcher.go). It is installed on
// the launcher's thread after no_new_privs and before execve, and is inherited by the
// command and everything it spawns.

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompPlan says which parts of the filter a run needs.
type seccompPlan struct {
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

func (s seccompPlan) any() bool { return s.metadata || s.net }

func (s seccompPlan) String() string {
	var parts []string
	if s.metadata {
		parts = append(parts, "metadata")
	}
	if s.net {
		parts = append(parts, "non-unix sockets")
	}
	if len(parts) == 0 {
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
	bpfRet      = unix.BPF_RET | unix.BPF_K

	seccompKill  = unix.SECCOMP_RET_KILL_PROCESS
	seccompAllow = unix.SECCOMP_RET_ALLOW
)

func seccompErrno(e unix.Errno) uint32 {
	return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA
}

// buildSeccompFilter assembles the filter for a. Every branch is either "skip the next
// instruction" or "skip a block that ends in a return", so no offset can exceed 255.
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
	deny := func(nr uint32, e unix.Errno) {
		prog = append(prog, bpfJump(bpfJEq, nr, 0, 1), bpfStmt(bpfRet, seccompErrno(e)))
	}
	// block appends "if nr == k { body }"; body must end in a return.
	block := func(nr uint32, body []unix.SockFilter) {
		prog = append(prog, bpfJump(bpfJEq, nr, 0, uint8(len(body))))
		prog = append(prog, body...)
	}
	// io_uring's SETXATTR and SOCKET operations would bypass the syscall filter.
	// ENOSYS, not EACCES: runtimes that probe for io_uring fall back quietly.
	for _, nr := range a.ioUring {
		deny(nr, unix.ENOSYS)
	}
	if s.vsockOnly {
		block(a.socket, []unix.SockFilter{
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*0),
			bpfJump(bpfJEq, unix.AF_VSOCK, 0, 1),
			bpfStmt(bpfRet, seccompErrno(unix.EACCES)),
			bpfStmt(bpfRet, seccompAllow),
		})
		return append(prog, bpfStmt(bpfRet, seccompAllow))
	}
	// prlimit64 changing another process's limits (pid not 0, new limit not NULL):
	// Landlock governs none of it, and a same-uid command could set toh-exec's, or
	// the fence daemon's, address-space limit and kill it before it reports. Its
	// own limits (pid 0, what setrlimit(2) sends) and reading any stay allowed.
	if a.prlimit != 0 {
		block(a.prlimit, []unix.SockFilter{
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*0), // pid (the kernel reads an int)
			bpfJump(bpfJEq, 0, 4, 0),
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*2), // new_limit, low half
			bpfJump(bpfJEq, 0, 0, 3),
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*2+4), // and high half
			bpfJump(bpfJEq, 0, 0, 1),
			bpfStmt(bpfRet, seccompAllow),
			bpfStmt(bpfRet, seccompErrno(unix.EPERM)),
		})
	}
	if s.metadata {
		for _, nr := range a.metadata {
			deny(nr, unix.EACCES)
		}
		body := []unix.SockFilter{bpfStmt(bpfLoadWord, seccompDataArgsLow+8*1)}
		for _, cmd := range seccompDeniedIoctls {
			body = append(body, bpfJump(bpfJEq, cmd, 0, 1), bpfStmt(bpfRet, seccompErrno(unix.EACCES)))
		}
		body = append(body, bpfStmt(bpfRet, seccompAllow))
		block(a.ioctl, body)
	}
	if s.net {
		block(a.socket, []unix.SockFilter{
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*0),
			bpfJump(bpfJEq, unix.AF_UNIX, 0, 1),
			bpfStmt(bpfRet, seccompAllow),
			bpfStmt(bpfRet, seccompErrno(unix.EACCES)),
		})
	}
	return append(prog, bpfStmt(bpfRet, seccompAllow))
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
