package strictmodes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReplaceable(t *testing.T) {
	const me = 1000
	for _, c := range []struct {
		uid  uint32
		mode uint32
		want bool
	}{
		{0, unix.S_IFDIR | 0o755, false},
		{me, unix.S_IFREG | 0o700, false},
		{me, unix.S_IFDIR | 0o1777, false}, // sticky: the entry's owner is checked next
		{0, unix.S_IFDIR | 0o1777, false},
		{1001, unix.S_IFDIR | 0o755, true}, // another user's
		{me, unix.S_IFDIR | 0o775, true},   // group may rename in it
		{me, unix.S_IFDIR | 0o757, true},
		{me, unix.S_IFREG | 0o1777, true}, // sticky means nothing on a file
		{me, unix.S_IFREG | 0o620, true},
	} {
		st := unix.Stat_t{Uid: c.uid, Mode: c.mode}
		if got := Replaceable(&st, me); got != c.want {
			t.Errorf("uid %d mode %07o: Replaceable = %v, want %v", c.uid, c.mode, got, c.want)
		}
	}
}

// Check follows the path as the kernel would and refuses what another user could
// change on the way: their link in a sticky directory, a directory group members
// may rename in. Controls: the caller's own link there is followed and the resolved
// path returned; a missing last component passes (the caller creates it).
func TestCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root: a link of another user's")
	}
	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil { // the umask may have left it open
		t.Fatal(err)
	}
	real, sticky, groupw := filepath.Join(base, "real"), filepath.Join(base, "sticky"), filepath.Join(base, "groupw")
	for _, d := range []string{real, sticky, groupw} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Chmod(sticky, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(groupw, 0o775); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"theirs", "mine"} {
		if err := os.Symlink(real, filepath.Join(sticky, l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(filepath.Join(sticky, "theirs"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want, err string }{
		{path: "sticky/mine/f", want: "real/f"},
		{path: "real/missing", want: "real/missing"},
		{path: "sticky/theirs/f", err: "the symlink " + filepath.Join(sticky, "theirs")},
		{path: "groupw/f", err: groupw + " is owned by uid 0 with mode 0775"},
	} {
		got, err := Check("the thing", filepath.Join(base, c.path))
		switch {
		case c.err == "" && (err != nil || got != filepath.Join(base, c.want)):
			t.Errorf("Check(%s) = %q, %v; want %q", c.path, got, err, filepath.Join(base, c.want))
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("Check(%s) = %q, %v; want an error with %q", c.path, got, err, c.err)
		}
	}
}
