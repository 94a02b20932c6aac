package canon

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzCanonicalMirrored checks Canonical under a registered Mirror against a real
// mount: real/ws bind-mounted at mnt stands in for the FUSE mount (a bind mount
// answers lookups itself, so walking it cannot deadlock). Without the registration
// Canonical walks through the bind mount the way the kernel would; with it, the
// result must be that walk's, with a spelling below mnt moved to real/ws, and must
// never lie below mnt. Root only (the bind mount).
func FuzzCanonicalMirrored(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root for the bind mount")
	}
	base := canonTree(f)
	mp, src := base+"/mnt", base+"/real/ws"
	if err := os.Mkdir(mp, 0o755); err != nil {
		f.Fatal(err)
	}
	for name, target := range map[string]string{
		base + "/into":        mp + "/sub",     // from outside into the mount
		src + "/back":         mp + "/f",       // from the source into the mount
		src + "/sub/mntup":    "../../../mnt",  // relative, reaching mnt from the source
		src + "/sub/throughs": "../up/ws/back", // up -> .. is the mount's parent through mnt
	} {
		if err := os.Symlink(target, name); err != nil {
			f.Fatal(err)
		}
	}
	if err := unix.Mount(src, mp, "", unix.MS_BIND, ""); err != nil {
		f.Skipf("bind mount: %v", err)
	}
	f.Cleanup(func() {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			f.Errorf("unmounting %s: %v", mp, err)
		}
	})
	for _, s := range []string{
		"mnt", "mnt/f", "mnt/sub/..", "mnt/sub/../..", "mnt/up", "mnt/up/ws/f", "mnt/out",
		"mnt/abs/canary", "mnt/back", "mnt/sub/mntup/f", "mnt/sub/throughs", "mnt/missing/../x",
		"mnt/loop", "mnt/tofile/x", "into", "into/..", "into/../..", "ws/back", "mnt/dangling/x",
		"mnt/sub/mntup/sub/mntup/up",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		p := base + "/" + rel
		ref := Canonical(p) // through the bind mount: nothing registered
		want := ref
		if LexicallyWithin(ref, mp) {
			want = src + ref[len(mp):]
		}
		m := ServeMirror(mp, src)
		got := Canonical(p)
		again := Canonical(got)
		m.Forget()
		if got != want {
			t.Fatalf("Canonical(%q) = %q with the mirror, want %q (%q through the mount)", p, got, want, ref)
		}
		if LexicallyWithin(got, mp) {
			t.Fatalf("Canonical(%q) = %q: inside the mirrored mount", p, got)
		}
		if again != got {
			t.Fatalf("Canonical(%q) = %q, but again %q", p, got, again)
		}
		if filepath.IsAbs(got) && filepath.Clean(got) != got {
			t.Fatalf("Canonical(%q) = %q: not clean", p, got)
		}
	})
}
