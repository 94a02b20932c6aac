package sandbox

import (
	"bytes"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// cacheKeySysctls decide whether unprivileged user namespaces work (bwrap's rung).
var cacheKeySysctls = []string{
	"/proc/sys/user/max_user_namespaces",
	"/proc/sys/kernel/unprivileged_userns_clone",
	"/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
	"/sys/kernel/security/lsm",
}

// cacheKey describes everything the verdict depends on (see [ProbeCache]). It runs on
// every confined call, so it is built from a uname, stats and small raw reads only:
// no file is hashed, and no *os.File is made (an os.File of a procfs file registers
// with the runtime's poller, which is set up for it on first use).
func cacheKey(files []string) string {
	b := make([]byte, 0, 512)
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		b = append(b, "kernel="...)
		b = append(b, utsString(u.Release[:])...)
		b = append(b, ' ')
		b = append(b, utsString(u.Version[:])...)
		b = append(b, ';')
	}
	b = append(b, "euid="...)
	b = strconv.AppendInt(b, int64(unix.Geteuid()), 10)
	b = append(b, ';')
	var buf [512]byte
	for _, s := range cacheKeySysctls {
		b = append(b, filepath.Base(s)...)
		b = append(b, '=')
		b = append(b, bytes.TrimSpace(readSmall(s, buf[:]))...)
		b = append(b, ';')
	}
	for _, f := range files {
		b = append(b, f...)
		b = append(b, '=')
		b = appendFileIdentity(b, f)
		b = append(b, ';')
	}
	return string(b)
}

// readSmall returns the start of the file at path (at most len(buf) bytes; the
// values read here are a few bytes long), or nothing when it cannot be read. A value
// longer than buf is cut short, which can only make two states look different.
func readSmall(path string, buf []byte) []byte {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
		n += m
	}
	return buf[:n]
}

// appendFileIdentity appends dev:ino:size:mtime:ctime of path, or "missing".
func appendFileIdentity(b []byte, path string) []byte {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return append(b, "missing"...)
	}
	b = strconv.AppendUint(b, uint64(st.Dev), 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, uint64(st.Ino), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(st.Size), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(st.Mtim.Sec), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(st.Mtim.Nsec), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(st.Ctim.Sec), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(st.Ctim.Nsec), 10)
	return b
}

func utsString(a []byte) string {
	if i := bytes.IndexByte(a, 0); i >= 0 {
		a = a[:i]
	}
	return string(a)
}

// readCacheFile reads the probe cache with plain system calls, for the reason given
// at cacheKey. Only a regular file of the caller's own, not a link, at most
// maxCacheBytes, in a directory of the caller's own that only the caller may write,
// reached without symlinks, is a cache: a FIFO planted there by a command that could
// once write the place (see [ProbeCache]) would otherwise hold every later call in
// open(2), and a directory it made unwritable would keep a verdict it wrote from
// being dropped.
func readCacheFile(path string) ([]byte, error) {
	dfd, err := openCacheDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	if !trustedCacheDir(dfd) {
		return nil, errNotACache
	}
	fd, err := unix.Openat(dfd, filepath.Base(path), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	// One link, as store leaves it: a drop that cannot remove the name empties the
	// file instead, and never a file linked elsewhere (truncateCacheFile).
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != unix.Geteuid() || st.Nlink != 1 || st.Size > maxCacheBytes {
		return nil, errNotACache
	}
	b := make([]byte, 0, int(st.Size)+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}
