package sandbox

import "golang.org/x/sys/unix"

// arm64 uses the generic syscall table: no chmod, chown, lchown, utime, utimes or
// futimesat (their *at forms cover them), and no second ABI on the same audit arch.
var landlockSeccompArch = seccompArch{
	auditArch: unix.AUDIT_ARCH_AARCH64,
	metadata: []uint32{
		unix.SYS_FCHMOD, unix.SYS_FCHMODAT, unix.SYS_FCHMODAT2,
		unix.SYS_FCHOWN, unix.SYS_FCHOWNAT,
		unix.SYS_UTIMENSAT,
		unix.SYS_SETXATTR, unix.SYS_LSETXATTR, unix.SYS_FSETXATTR, unix.SYS_SETXATTRAT,
		unix.SYS_REMOVEXATTR, unix.SYS_LREMOVEXATTR, unix.SYS_FREMOVEXATTR, unix.SYS_REMOVEXATTRAT,
		unix.SYS_FILE_SETATTR,
	},
	ioctl:   unix.SYS_IOCTL,
	socket:  unix.SYS_SOCKET,
	ioUring: []uint32{unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER},
	prlimit: unix.SYS_PRLIMIT64,
}
