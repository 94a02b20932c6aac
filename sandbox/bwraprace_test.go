package sandbox

import "testing"

func TestBwrapMountRace(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{`bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/var/tmp/p1/mnt": No such file or directory`, true},
		{`bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/run/media/x": Invalid argument`, true},
		{"bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount \"/newroot/a\": No such file or directory\r", true},
		// Other set-up failures stay failures.
		{`bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/a": Permission denied`, false},
		{`bwrap: setting up uid map: Permission denied`, false},
		{`bwrap: Creating new namespace failed: Operation not permitted`, false},
		// Not bwrap's line.
		{`Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/a": No such file or directory`, false},
		{`x bwrap: remount "/a": No such file or directory`, false},
		{``, false},
	} {
		if got := bwrapMountRace(c.line); got != c.want {
			t.Errorf("bwrapMountRace(%q) = %v, want %v", c.line, got, c.want)
		}
	}
}
