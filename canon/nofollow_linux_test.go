package canon

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A directory on the walked path swapped for a symlink between two lookups of a
// tracking walk (a FUSE daemon canonicalizing inside a request) must not take the
// next lookup through the link: into the daemon's own mount that lookup would wait
// for the daemon itself. The walk refuses instead. Control: with the plain lstat
// (what runs without openat2) the same swap is followed, so the test can tell.
func TestWalkRefusesSwappedComponent(t *testing.T) {
	for _, plain := range []bool{false, true} {
		base := t.TempDir()
		for _, d := range []string{"a/X", "elsewhere"} {
			if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(base, "a/X/Y"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/followed-the-swapped-link", filepath.Join(base, "elsewhere/Y")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(base, "elsewhere"), filepath.Join(base, "a/Xl")); err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(base, "a/X/Y")
		swapped := false
		testHookLookup = func(p string) {
			if p == want && !swapped {
				swapped = true
				if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(base, "a/X"), unix.AT_FDCWD, filepath.Join(base, "a/Xl"), unix.RENAME_EXCHANGE); err != nil {
					t.Errorf("swapping: %v", err)
				}
			}
		}
		saved := noOpenat2.Load()
		noOpenat2.Store(plain)
		got, ok := CanonicalAvoiding(want, 1<<40) // a device nothing is on: tracking, nothing avoided
		noOpenat2.Store(saved)
		testHookLookup = nil
		if !swapped {
			t.Fatalf("plain %v: the walk never looked %s up", plain, want)
		}
		switch {
		case plain && got != "/followed-the-swapped-link":
			t.Fatalf("control (plain lstat): %q, %v; the swapped link was not followed, so the test proves nothing", got, ok)
		case !plain && got != want:
			t.Errorf("the walk followed a component swapped for a link: %q, %v; want %q (refused there)", got, ok, want)
		}
	}
}
