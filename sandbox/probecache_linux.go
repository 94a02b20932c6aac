package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// cacheKey describes everything the verdict depends on (see [ProbeCache]).
func cacheKey(files []string) string {
	var b strings.Builder
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		fmt.Fprintf(&b, "kernel=%s %s;", utsString(u.Release[:]), utsString(u.Version[:]))
	}
	fmt.Fprintf(&b, "euid=%d;", os.Geteuid())
	for _, s := range []string{
		"/proc/sys/user/max_user_namespaces",
		"/proc/sys/kernel/unprivileged_userns_clone",
		"/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
		"/sys/kernel/security/lsm",
	} {
		v, _ := os.ReadFile(s)
		fmt.Fprintf(&b, "%s=%s;", filepath.Base(s), strings.TrimSpace(string(v)))
	}
	for _, f := range files {
		fmt.Fprintf(&b, "%s=%s;", f, fileIdentity(f))
	}
	return b.String()
}

func fileIdentity(path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "missing"
	}
	return fmt.Sprintf("%d:%d:%d:%d.%d:%d.%d", st.Dev, st.Ino, st.Size,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

func utsString(a []byte) string {
	if i := bytes.IndexByte(a, 0); i >= 0 {
		a = a[:i]
	}
	return string(a)
}
