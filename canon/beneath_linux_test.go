package canon

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

type beneathImpl struct {
	name string
	open openFunc
}

// beneathImpls runs every case through the public entry point, openat2 directly and
// the fallback walk, so both mechanisms are held to the same table.
func beneathImpls(t *testing.T) []beneathImpl {
	impls := []beneathImpl{{"OpenBeneath", openBeneath}, {"walk", openWalk}}
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
	if err != nil {
		t.Logf("openat2 unusable here (%v): only the walk is tested", err)
		return impls
	}
	unix.Close(fd)
	return append(impls, beneathImpl{"openat2", openat2Beneath})
}

var platformBeneathCases = []beneathCase{
	{path: "a/lnk", flags: unix.O_PATH, err: unix.ELOOP},
	{path: "a/lnk/c", flags: unix.O_PATH | unix.O_NOFOLLOW, err: unix.ELOOP},
	// As in open(2), O_PATH|O_NOFOLLOW names the symlink itself without following it.
	{path: "a/lnk", flags: unix.O_PATH | unix.O_NOFOLLOW, same: "a/lnk"},
	{path: "a/b", flags: unix.O_PATH | unix.O_DIRECTORY, same: "a/b"},
}

// Magic links (/proc/self/cwd, /proc/self/root, /proc/self/fd/N) are refused like
// any symlink, even though the kernel would "follow" them without a lookup.
func TestOpenBeneathMagicLinks(t *testing.T) {
	rootFd, err := OpenRoot("/proc/self")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	defer unix.Close(rootFd)
	for _, impl := range beneathImpls(t) {
		for _, p := range []string{"cwd", "root/etc", "exe", "fd/0", "cwd/x"} {
			fd, err := impl.open(rootFd, p, unix.O_RDONLY, 0)
			if !errors.Is(err, unix.ELOOP) {
				t.Errorf("%s: open /proc/self/%s beneath /proc/self = %d, %v; want ELOOP", impl.name, p, fd, err)
			}
			if err == nil {
				unix.Close(fd)
			}
		}
		// Positive control: a plain file beneath /proc/self opens.
		fd, err := impl.open(rootFd, "status", unix.O_RDONLY, 0)
		if err != nil {
			t.Errorf("%s: open /proc/self/status: %v", impl.name, err)
		} else {
			unix.Close(fd)
		}
	}
}
