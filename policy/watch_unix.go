//go:build unix

package policy

import "golang.org/x/sys/unix"

// fileStamp identifies one version of the policy file. errno keeps "missing" and
// "unreadable" apart, so a permission change is noticed too.
type fileStamp struct {
	errno        unix.Errno
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

func statStamp(path string) fileStamp {
	var st unix.Stat_t
	for {
		err := unix.Stat(path, &st)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if e, ok := err.(unix.Errno); ok {
				return fileStamp{errno: e}
			}
			return fileStamp{errno: unix.EIO}
		}
		break
	}
	return fileStamp{
		dev:   uint64(st.Dev),
		ino:   uint64(st.Ino),
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
	}
}
