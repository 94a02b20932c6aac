package canon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
	"golang.org/x/sys/unix"
)

// realTempDir is t.TempDir() spelled without symlinks (on macOS /tmp is one), found
// by the standard library rather than by the code under test.
func realTempDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// canonTree is the tree the Canonical, Within and fuzz tests share.
func canonTree(t testing.TB) string {
	t.Helper()
	base := realTempDir(t)
	spec := []string{
		"dir real/ws/sub",
		"file real/ws/f hello",
		"link ws -> real/ws",
		"link alias -> real/ws",
		"dir outside",
		"file outside/canary do not touch",
		"link real/ws/out -> ../../outside",
		"link real/ws/abs -> " + base + "/outside",
		"link real/ws/up -> ..",
		"link real/ws/tofile -> f",
		"link real/ws/dangling -> nowhere/deeper",
		"link real/ws/loop -> loop",
		"link loop1 -> loop2",
		"link loop2 -> loop1",
		"link self -> self",
		// c/l0 expands through exactly 40 links, c/m0 through 41.
		"link c/l39 -> ../real",
		"link c/m0 -> l0",
	}
	for i := range 39 {
		spec = append(spec, fmt.Sprintf("link c/l%d -> l%d", i, i+1))
	}
	testutil.MakeTree(t, base, spec...)
	return base
}

// under spells a case's path: "" is base itself, "/..." is absolute, anything else
// is relative to base.
func under(base, p string) string {
	switch {
	case p == "":
		return base
	case strings.HasPrefix(p, "/"):
		return p
	}
	return base + "/" + p
}

func TestCanonical(t *testing.T) {
	base := canonTree(t)
	tests := []struct{ in, want string }{
		{"ws", "real/ws"},
		{"ws/sub", "real/ws/sub"},
		{"ws//sub/./", "real/ws/sub"},
		// ".." after a symlink is the parent of its target, not of the link.
		{"ws/..", "real"},
		{"ws/sub/../..", "real"},
		{"ws/up/ws/sub", "real/ws/sub"},
		{"ws/out", "outside"},
		{"ws/out/..", ""},
		{"ws/abs/canary", "outside/canary"},
		{"ws/tofile", "real/ws/f"},
		// Missing suffixes: ".." first cancels missing names, then walks physically.
		{"ws/missing/a/b", "real/ws/missing/a/b"},
		{"ws/missing/../sub", "real/ws/sub"},
		{"ws/missing/../../x", "real/x"},
		{"ws/dangling/x", "real/ws/nowhere/deeper/x"},
		{"ws/out/new/../x", "outside/x"},
		// Through a regular file: the rest is kept, ".." cannot climb over the file.
		{"ws/f/x", "real/ws/f/x"},
		{"ws/tofile/x", "real/ws/f/x"},
		{"ws/f/x/../..", "real/ws/f"},
		// Unresolvable: the spelling is kept from the failing component on.
		{"loop1/x", "loop1/x"},
		{"loop1/../x", "loop1/x"},
		{"self", "self"},
		{"ws/loop/a/../../b", "real/ws/loop/b"},
		// 40 links resolve, 41 do not (the kernel's MAXSYMLINKS)...
		{"c/l0", "real"},
		{"c/m0/x", "c/m0/x"},
		// ...but the limit is per component of the caller's path (see package doc).
		{"c/l0/../c/l0", "real"},
		{"/", "/"},
		{"/..", "/"},
		{"//", "/"},
		{"/./.", "/"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			in := under(base, tt.in)
			want := under(base, tt.want)
			got := Canonical(in)
			if got != want {
				t.Errorf("Canonical(%q) = %q, want %q", in, got, want)
			}
			if again := Canonical(got); again != got {
				t.Errorf("not idempotent: Canonical(%q) = %q", got, again)
			}
			if k, ok := kernelRealpath(in); ok && k != got {
				t.Errorf("Canonical(%q) = %q, kernel resolves it to %q", in, got, k)
			}
		})
	}
	if Canonical("") != "" {
		t.Errorf("Canonical(\"\") = %q, want \"\"", Canonical(""))
	}
}

// The link limit matches the kernel's for the whole-path case.
func TestCanonicalLinkLimitMatchesKernel(t *testing.T) {
	base := canonTree(t)
	if _, err := os.Stat(base + "/c/l0"); err != nil {
		t.Errorf("kernel refuses 40 links: %v", err)
	}
	if _, err := os.Stat(base + "/c/m0"); !errors.Is(err, unix.ELOOP) {
		t.Errorf("kernel on 41 links: %v, want ELOOP", err)
	}
}

func TestCanonicalRelative(t *testing.T) {
	base := canonTree(t)
	t.Chdir(base + "/ws")
	tests := []struct{ in, want string }{
		{".", "real/ws"},
		{"sub", "real/ws/sub"},
		{"..", "real"},
		{"missing/x", "real/ws/missing/x"},
		{"out/canary", "outside/canary"},
	}
	for _, tt := range tests {
		if got, want := Canonical(tt.in), under(base, tt.want); got != want {
			t.Errorf("Canonical(%q) in %s/ws = %q, want %q", tt.in, base, got, want)
		}
	}
}

// The key of a missing path is the key of the path once it exists.
func TestCanonicalStableAcrossCreation(t *testing.T) {
	base := canonTree(t)
	for _, p := range []string{
		"ws/new1/a/b",
		"ws/out/new2/x",
		"ws/new3/../new4/y",
		"ws/new5/../../real/new6",
	} {
		before := Canonical(base + "/" + p)
		if err := os.MkdirAll(base+"/"+p, 0o755); err != nil {
			t.Fatal(err)
		}
		if after := Canonical(base + "/" + p); after != before {
			t.Errorf("%s: canonical %q before creation, %q after", p, before, after)
		}
		if k, ok := kernelRealpath(base + "/" + p); ok && k != before {
			t.Errorf("%s: canonical %q before creation, kernel says %q after", p, before, k)
		}
	}
}

// EACCES on the way keeps the spelling; root is not stopped by it.
func TestCanonicalUnsearchable(t *testing.T) {
	base := canonTree(t)
	testutil.MakeTree(t, base, "link locked/l -> ../real")
	if err := os.Chmod(base+"/locked", 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(base+"/locked", 0o755) })
	want := base + "/real/ws"
	if os.Geteuid() != 0 {
		want = base + "/locked/l/ws"
	}
	if got := Canonical(base + "/locked/l/ws"); got != want {
		t.Errorf("Canonical(locked/l/ws) as euid %d = %q, want %q", os.Geteuid(), got, want)
	}
}
