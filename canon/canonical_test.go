package canon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// EachLink meets the links of Canonical's walk in the kernel's order, each named in
// its canonical parent, reports what exists, and stops where its visitor says so.
func TestEachLink(t *testing.T) {
	base := canonTree(t)
	tests := []struct {
		in     string
		links  []string
		exists bool
		err    error
	}{
		{in: "real/ws/sub", exists: true},
		{in: "ws/sub", links: []string{"ws"}, exists: true},
		{in: "ws/up/ws/out/canary", links: []string{"ws", "real/ws/up", "real/ws/out"}, exists: true},
		{in: "alias/abs/..", links: []string{"alias", "real/ws/abs"}, exists: true},
		{in: "ws/tofile", links: []string{"ws", "real/ws/tofile"}, exists: true},
		{in: "ws/missing/../out", links: []string{"ws", "real/ws/out"}, exists: true},
		{in: "ws/missing/x", links: []string{"ws"}},
		{in: "ws/dangling", links: []string{"ws", "real/ws/dangling"}},
		{in: "ws/tofile/x", links: []string{"ws", "real/ws/tofile"}},
		{in: "loop1", links: slices.Repeat([]string{"loop1", "loop2"}, 20), err: unix.ELOOP},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var links []string
			got, exists, err := EachLink(under(base, tt.in), func(link string, st *unix.Stat_t) error {
				if st.Mode&unix.S_IFMT != unix.S_IFLNK {
					t.Errorf("visited %s with mode %o", link, st.Mode)
				}
				links = append(links, strings.TrimPrefix(link, base+"/"))
				return nil
			})
			if want := Canonical(under(base, tt.in)); got != want {
				t.Errorf("path %q, want Canonical's %q", got, want)
			}
			if !slices.Equal(links, tt.links) || exists != tt.exists || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Errorf("links %q, exists %v, err %v; want %q, %v, %v", links, exists, err, tt.links, tt.exists, tt.err)
			}
		})
	}

	stop := errors.New("stop")
	var seen []string
	_, exists, err := EachLink(base+"/ws/up/ws", func(link string, _ *unix.Stat_t) error {
		seen = append(seen, link)
		if len(seen) == 2 {
			return stop
		}
		return nil
	})
	if err != stop || exists || len(seen) != 2 {
		t.Errorf("a visitor's error: seen %q, exists %v, err %v; want the walk stopped at the second link", seen, exists, err)
	}
	if _, exists, err := EachLink("", nil); exists || err == nil {
		t.Errorf(`EachLink("") = exists %v, err %v; want an error`, exists, err)
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
