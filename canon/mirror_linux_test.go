package canon

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMirror stands in a plain directory for a FUSE mount this process serves: mp
// shows different names from src, so a lookup made on the wrong one is seen.
func TestMirror(t *testing.T) {
	base := Canonical(t.TempDir())
	mp, src := filepath.Join(base, "mnt"), filepath.Join(base, "deep", "src")
	for _, d := range []string{mp + "/only-in-mp", src + "/sub/d", base + "/elsewhere"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{
		src + "/link":       "sub/d",
		src + "/abs":        mp + "/sub", // leads through the mount again
		src + "/up":         "../..",     // above the mount's root: mp's parent
		base + "/via-mount": mp + "/link",
	} {
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ in, want string }{
		{mp, src},
		{mp + "/link", src + "/sub/d"},
		{mp + "/abs/d", src + "/sub/d"},
		{mp + "/sub/..", src},
		{mp + "/sub/../..", base}, // the kernel's ".." above the mount root
		{mp + "/up", filepath.Dir(base)},
		{mp + "/missing/x", src + "/missing/x"},
		{mp + "/only-in-mp", src + "/only-in-mp"}, // not looked up in mp
		{base + "/via-mount", src + "/sub/d"},
		{base + "/elsewhere", base + "/elsewhere"},
	}
	// The control: with nothing registered, the same walks look names up in mp.
	if got := Canonical(mp + "/link"); got != mp+"/link" {
		t.Fatalf("control: Canonical(%q) = %q before registering", mp+"/link", got)
	}
	m := ServeMirror(mp, src)
	for _, tc := range cases {
		if got := Canonical(tc.in); got != tc.want {
			t.Errorf("Canonical(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if !Within(mp+"/link/x", src+"/sub") || !Within(mp+"/x", mp) || Within(mp+"/up/x", src) {
		t.Errorf("Within does not resolve through the mirror")
	}
	if got := HostSpelling(mp + "/a/b"); got != src+"/a/b" {
		t.Errorf("HostSpelling = %q", got)
	}
	// CanonicalAvoiding is not translated: its caller wants to hear of the mount.
	if got, _ := CanonicalAvoiding(mp+"/only-in-mp", 0); got != mp+"/only-in-mp" {
		t.Errorf("CanonicalAvoiding(_, 0) = %q, want the walk through mp", got)
	}
	m.Forget()
	m.Forget()
	if got := Canonical(mp + "/link"); got != mp+"/link" {
		t.Errorf("after Forget: Canonical(%q) = %q", mp+"/link", got)
	}
}

// TestMirrorReachedElsewhere: a served mount reached other than through its
// mountpoint (here /proc, by its device) is never looked into, and such a path is
// contained in nothing.
func TestMirrorReachedElsewhere(t *testing.T) {
	var proc, root unix.Stat_t
	if err := unix.Lstat("/proc", &proc); err != nil || unix.Lstat("/", &root) != nil || proc.Dev == root.Dev {
		t.Skip("no separate /proc here")
	}
	if got := Canonical("/proc/self"); got == "" {
		t.Fatalf("control: Canonical(/proc/self) is empty with nothing registered")
	}
	m := ServeMirror(Canonical(t.TempDir())+"/mp", "/nonexistent-source")
	defer m.Forget()
	m.SetDevice(uint64(proc.Dev))
	for _, p := range []string{"/proc/self", "/proc/nonexistent/x"} {
		if got := Canonical(p); got != "" {
			t.Errorf("Canonical(%q) = %q, want \"\"", p, got)
		}
		if Within(p, "/") {
			t.Errorf("Within(%q, /) with /proc served", p)
		}
	}
	if got := Canonical("/proc"); got != "/proc" {
		t.Errorf("Canonical(/proc) = %q: stepping onto the root looks nothing up inside", got)
	}
}
