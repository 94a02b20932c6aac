package strictmodes

import (
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
