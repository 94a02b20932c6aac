package sandbox

import "golang.org/x/sys/unix"

var landlockSeccompArch = seccompArch{
	auditArch: unix.AUDIT_ARCH_X86_64,
	x32Bit:    0x40000000, // __X32_SYSCALL_BIT
	metadata: []uint32{
		unix.SYS_CHMOD, unix.SYS_FCHMOD, unix.SYS_FCHMODAT, unix.SYS_FCHMODAT2,
		unix.SYS_CHOWN, unix.SYS_FCHOWN, unix.SYS_LCHOWN, unix.SYS_FCHOWNAT,
		unix.SYS_UTIME, unix.SYS_UTIMES, unix.SYS_FUTIMESAT, unix.SYS_UTIMENSAT,
		unix.SYS_SETXATTR, unix.SYS_LSETXATTR, unix.SYS_FSETXATTR, unix.SYS_SETXATTRAT,
		unix.SYS_REMOVEXATTR, unix.SYS_LREMOVEXATTR, unix.SYS_FREMOVEXATTR, unix.SYS_REMOVEXATTRAT,
		unix.SYS_FILE_SETATTR,
	},
	ioctl:   unix.SYS_IOCTL,
	socket:  unix.SYS_SOCKET,
	ioUring: []uint32{unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER},
	prlimit: unix.SYS_PRLIMIT64,
}
