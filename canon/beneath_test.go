package canon

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
	"golang.org/x/sys/unix"
)

// beneathTree makes base/root (the tree OpenBeneath gets) next to base/outside (what
// it must never reach) and returns base and an fd for base/root.
func beneathTree(t *testing.T) (string, int) {
	t.Helper()
	base := realTempDir(t)
	testutil.MakeTree(t, base,
		"dir root/a/b/c",
		"file root/a/f hi",
		"file root/a/b/g",
		"link root/a/lnk -> b",
		"link root/a/abs -> "+base+"/outside",
		"link root/a/esc -> ../../outside",
		"link root/a/up -> ..",
		"link root/a/dang -> nowhere",
		"link root/top -> a",
		"file outside/canary do not touch",
	)
	fd, err := OpenRoot(base + "/root")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return base, fd
}

// requireOutsideUntouched is every test's negative control: the canary directory
// still holds exactly the canary, byte-identical.
func requireOutsideUntouched(t *testing.T, base string) {
	t.Helper()
	ents, err := os.ReadDir(base + "/outside")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"canary"}) {
		t.Errorf("outside holds %q, want only the canary", names)
	}
	if b, err := os.ReadFile(base + "/outside/canary"); err != nil || string(b) != "do not touch" {
		t.Errorf("canary changed: %q, %v", b, err)
	}
}

// sameFile reports whether fd is the object at path (not following a final symlink).
func sameFile(t *testing.T, fd int, path string) bool {
	t.Helper()
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(path, &b); err != nil {
		t.Fatalf("lstat %s: %v", path, err)
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

type beneathCase struct {
	path  string
	flags int
	err   error  // nil: must succeed
	same  string // on success, the fd is this path under root ("" = root)
}

var beneathCases = []beneathCase{
	{path: "a/f", flags: unix.O_RDONLY, same: "a/f"},
	{path: "/a/f", flags: unix.O_RDONLY, same: "a/f"},
	{path: "//a//b/../f", flags: unix.O_RDONLY, same: "a/f"},
	{path: "", flags: unix.O_RDONLY | unix.O_DIRECTORY},
	{path: ".", flags: unix.O_RDONLY},
	{path: "/", flags: unix.O_RDONLY},
	{path: "a/b/", flags: unix.O_RDONLY, same: "a/b"},
	{path: "a/b/c/../../f", flags: unix.O_RDONLY, same: "a/f"},
	{path: "a/f/", flags: unix.O_RDONLY, err: unix.ENOTDIR},
	// Symlinks: in the middle, at the end, to outside, to the parent.
	{path: "a/lnk/c", flags: unix.O_RDONLY, err: unix.ELOOP},
	{path: "a/lnk", flags: unix.O_RDONLY, err: unix.ELOOP},
	{path: "a/lnk", flags: unix.O_RDONLY | unix.O_DIRECTORY, err: unix.ELOOP},
	{path: "a/lnk/", flags: unix.O_RDONLY, err: unix.ELOOP},
	{path: "a/abs/canary", flags: unix.O_RDONLY, err: unix.ELOOP},
	{path: "a/esc", flags: unix.O_RDONLY, err: unix.ELOOP},
	{path: "a/up/a", flags: unix.O_RDONLY, err: unix.ELOOP},
	{path: "top/f", flags: unix.O_RDONLY, err: unix.ELOOP},
	{path: "a/dang", flags: unix.O_RDONLY, err: unix.ELOOP},
	{path: "a/dang", flags: unix.O_WRONLY | unix.O_CREAT, err: unix.ELOOP},
	{path: "a/abs", flags: unix.O_WRONLY | unix.O_CREAT, err: unix.ELOOP},
	// Escapes by "..".
	{path: "..", flags: unix.O_RDONLY, err: unix.EXDEV},
	{path: "../outside/canary", flags: unix.O_RDONLY, err: unix.EXDEV},
	{path: "a/../../outside/canary", flags: unix.O_RDONLY, err: unix.EXDEV},
	{path: "/../outside", flags: unix.O_RDONLY, err: unix.EXDEV},
	{path: "a/missing/f", flags: unix.O_RDONLY, err: unix.ENOENT},
	{path: "a/f/x", flags: unix.O_RDONLY, err: unix.ENOTDIR},
	// Creation: the positive control.
	{path: "a/new", flags: unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL, same: "a/new"},
	{path: "a/b/new2", flags: unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL, same: "a/b/new2"},
	{path: "a/new3/", flags: unix.O_WRONLY | unix.O_CREAT, err: unix.EISDIR},
	{path: "a/f", flags: unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL, err: unix.EEXIST},
}

func TestOpenBeneath(t *testing.T) {
	for _, impl := range beneathImpls(t) {
		t.Run(impl.name, func(t *testing.T) {
			base, rootFd := beneathTree(t)
			for _, tt := range append(beneathCases, platformBeneathCases...) {
				fd, err := impl.open(rootFd, tt.path, tt.flags, 0o600)
				if tt.err != nil {
					if !errors.Is(err, tt.err) {
						t.Errorf("open %q (flags %#x) = %d, %v; want %v", tt.path, tt.flags, fd, err, tt.err)
					}
					if err == nil {
						unix.Close(fd)
					}
					continue
				}
				if err != nil {
					t.Errorf("open %q (flags %#x): %v", tt.path, tt.flags, err)
					continue
				}
				if !sameFile(t, fd, base+"/root/"+tt.same) {
					t.Errorf("open %q gave an fd that is not root/%s", tt.path, tt.same)
				}
				unix.Close(fd)
			}
			requireOutsideUntouched(t, base)
			if _, err := os.Lstat(base + "/root/a/nowhere"); err == nil {
				t.Error("O_CREAT through the dangling symlink created its target")
			}
		})
	}
}

func TestOpenBeneathErrorContext(t *testing.T) {
	_, rootFd := beneathTree(t)
	_, err := OpenBeneath(rootFd, "a/lnk/c", unix.O_RDONLY, 0)
	var pe *PathError
	if !errors.As(err, &pe) || pe.Op != "openbeneath" || pe.Path != "a/lnk/c" || !errors.Is(err, unix.ELOOP) {
		t.Errorf("err = %#v (%v), want *PathError{Op: openbeneath, Path: a/lnk/c} matching ELOOP", err, err)
	}
	_, _, err = OpenParentBeneath(rootFd, "../x")
	if !errors.As(err, &pe) || pe.Op != "openparentbeneath" || pe.Path != "../x" || !errors.Is(err, unix.EXDEV) {
		t.Errorf("err = %#v (%v), want *PathError{Op: openparentbeneath, Path: ../x} matching EXDEV", err, err)
	}
	if _, err := OpenRoot("/nonexistent/toh"); !errors.As(err, &pe) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenRoot of a missing dir: %v, want *PathError matching ErrNotExist", err)
	}
}

func TestOpenParentBeneath(t *testing.T) {
	tests := []struct {
		path string
		err  error
		dir  string // on success, the parent is this path under root
		base string
	}{
		{path: "a/b/newdir", dir: "a/b", base: "newdir"},
		{path: "newtop", dir: "", base: "newtop"},
		{path: "/a/newdir", dir: "a", base: "newdir"},
		{path: "a/b/../newdir", dir: "a", base: "newdir"},
		{path: "a/lnk", dir: "a", base: "lnk"}, // the link itself is the object
		{path: "a/lnk/newdir", err: unix.ELOOP},
		{path: "a/abs/newdir", err: unix.ELOOP},
		{path: "top/newdir", err: unix.ELOOP},
		{path: "../newdir", err: unix.EXDEV},
		{path: "a/../../outside/newdir", err: unix.EXDEV},
		{path: "a/missing/newdir", err: unix.ENOENT},
		{path: "a/f/newdir", err: unix.ENOTDIR},
		{path: "", err: unix.EINVAL},
		{path: ".", err: unix.EINVAL},
		{path: "..", err: unix.EINVAL},
		{path: "a/..", err: unix.EINVAL},
		{path: "a/", err: unix.EINVAL},
		{path: "/", err: unix.EINVAL},
	}
	for _, impl := range beneathImpls(t) {
		t.Run(impl.name, func(t *testing.T) {
			base, rootFd := beneathTree(t)
			for _, tt := range tests {
				dirFd, name, err := openParentWith(impl.open, rootFd, tt.path)
				if tt.err != nil {
					if !errors.Is(err, tt.err) {
						t.Errorf("parent of %q = %d, %q, %v; want %v", tt.path, dirFd, name, err, tt.err)
					}
					if err == nil {
						unix.Close(dirFd)
					}
					continue
				}
				if err != nil {
					t.Errorf("parent of %q: %v", tt.path, err)
					continue
				}
				if dirFd == rootFd {
					t.Errorf("parent of %q is rootFd itself; the caller would close the root", tt.path)
				}
				if name != tt.base || !sameFile(t, dirFd, base+"/root/"+tt.dir) {
					t.Errorf("parent of %q = (fd of ?, %q), want (root/%s, %q)", tt.path, name, tt.dir, tt.base)
				}
				if tt.base != "lnk" {
					if err := unix.Mkdirat(dirFd, name, 0o755); err != nil {
						t.Errorf("mkdirat through parent of %q: %v", tt.path, err)
					} else if fi, err := os.Lstat(base + "/root/" + tt.dir + "/" + name); err != nil || !fi.IsDir() {
						t.Errorf("mkdirat through parent of %q did not land in root/%s: %v", tt.path, tt.dir, err)
					}
					unix.Unlinkat(dirFd, name, unix.AT_REMOVEDIR)
				}
				unix.Close(dirFd)
			}
			requireOutsideUntouched(t, base)
		})
	}
}

// The public OpenParentBeneath is openParentWith(openBeneath); check the wiring once.
func TestOpenParentBeneathPublic(t *testing.T) {
	base, rootFd := beneathTree(t)
	dirFd, name, err := OpenParentBeneath(rootFd, "a/b/x")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirFd)
	if name != "x" || !sameFile(t, dirFd, base+"/root/a/b") {
		t.Errorf("OpenParentBeneath(a/b/x) = (?, %q), want (root/a/b, x)", name)
	}
	if _, _, err := OpenParentBeneath(rootFd, "a/lnk/x"); !errors.Is(err, unix.ELOOP) {
		t.Errorf("OpenParentBeneath(a/lnk/x): %v, want ELOOP", err)
	}
}
