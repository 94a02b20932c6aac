package canon

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCanonicalAvoiding uses /proc as the file system to avoid: a separate mount on
// every Linux host, with names to look up inside it.
func TestCanonicalAvoiding(t *testing.T) {
	var proc, root unix.Stat_t
	if err := unix.Lstat("/proc", &proc); err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if err := unix.Lstat("/", &root); err != nil {
		t.Fatal(err)
	}
	if proc.Dev == root.Dev {
		t.Skip("/proc is not a separate mount here")
	}
	dev := uint64(proc.Dev)
	dir := t.TempDir()
	link := func(name, target string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	into := link("into", "/proc/self")
	onto := link("onto", "/proc")
	hop := link("hop", "into") // a chain that ends inside
	back := link("back", "/proc/../tmp")

	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/proc", true},       // onto the mount root: no lookup inside it
		{"/proc/..", true},    // and back out
		{"/proc/self", false}, // a lookup inside it
		{"/proc/nonexistent/x", false},
		{into, false},
		{hop, false},
		{onto, true},
		{back, true},
		{onto + "/self", false},
		{filepath.Join(dir, "plain"), true},
		{"/etc/../usr", true},
	} {
		got, ok := CanonicalAvoiding(tc.path, dev)
		if ok != tc.ok {
			t.Errorf("CanonicalAvoiding(%q): ok = %v (path %q), want %v", tc.path, ok, got, tc.ok)
		}
		if ok {
			// Where it stays out, it is exactly Canonical.
			if want := Canonical(tc.path); got != want {
				t.Errorf("CanonicalAvoiding(%q) = %q, Canonical says %q", tc.path, got, want)
			}
		}
		// The control: nothing is avoided without a device, and Canonical itself
		// walks straight in.
		if got, ok := CanonicalAvoiding(tc.path, 0); !ok || got != Canonical(tc.path) {
			t.Errorf("CanonicalAvoiding(%q, 0) = %q, %v; want Canonical's %q, true", tc.path, got, ok, Canonical(tc.path))
		}
	}
	if got := Canonical(into); got == into || filepath.Dir(got) != "/proc" {
		t.Errorf("Canonical(%q) = %q: the control should resolve into /proc", into, got)
	}
}
