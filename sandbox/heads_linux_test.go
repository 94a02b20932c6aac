package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// mendGitDir puts back an invalid HEAD and missing or non-directory objects/ and
// refs/, sets aside what was there, and leaves a valid git directory alone, a HEAD
// that is a link into refs/ and an objects/ reached through a link included.
func TestMendGitDir(t *testing.T) {
	saved := []byte("ref: refs/heads/main\n")
	mk := func(t *testing.T) (string, int) {
		d := t.TempDir()
		for _, sub := range []string{"objects", "refs/heads"} {
			if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, "HEAD"), saved, 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return d, fd
	}
	for name, c := range map[string]struct {
		breakIt func(d string) error
		fixed   []string
		aside   []string // set-aside names, by prefix
	}{
		"valid": {func(string) error { return nil }, nil, nil},
		"HEAD a link into refs/": {func(d string) error {
			os.Remove(filepath.Join(d, "HEAD"))
			return os.Symlink("refs/heads/main", filepath.Join(d, "HEAD"))
		}, nil, nil},
		"objects a link to a directory": {func(d string) error {
			os.Rename(filepath.Join(d, "objects"), filepath.Join(d, "o2"))
			return os.Symlink("o2", filepath.Join(d, "objects"))
		}, nil, nil},
		"HEAD missing": {func(d string) error { return os.Remove(filepath.Join(d, "HEAD")) }, []string{`HEAD ("ref: refs/heads/main")`}, nil},
		"HEAD garbage": {func(d string) error { return os.WriteFile(filepath.Join(d, "HEAD"), []byte("x"), 0o644) }, []string{`HEAD ("ref: refs/heads/main")`}, nil},
		"HEAD a link elsewhere": {func(d string) error {
			os.Remove(filepath.Join(d, "HEAD"))
			return os.Symlink("/etc/passwd", filepath.Join(d, "HEAD"))
		}, []string{`HEAD ("ref: refs/heads/main")`}, nil},
		"HEAD a directory": {func(d string) error {
			os.Remove(filepath.Join(d, "HEAD"))
			return os.Mkdir(filepath.Join(d, "HEAD"), 0o755)
		}, []string{`HEAD ("ref: refs/heads/main")`}, []string{"HEAD.toh-aside-"}},
		"the temporary name taken": {func(d string) error {
			for _, n := range []string{"HEAD.toh-restore", "HEAD.toh-aside"} {
				os.Mkdir(filepath.Join(d, n), 0o755)
			}
			return os.Remove(filepath.Join(d, "HEAD"))
		}, []string{`HEAD ("ref: refs/heads/main")`}, nil},
		"refs missing": {func(d string) error { return os.RemoveAll(filepath.Join(d, "refs")) }, []string{"an empty refs/"}, nil},
		"objects a file": {func(d string) error {
			os.RemoveAll(filepath.Join(d, "objects"))
			return os.WriteFile(filepath.Join(d, "objects"), nil, 0o644)
		}, []string{"an empty objects/"}, []string{"objects.toh-aside-"}},
		"objects a dangling link": {func(d string) error {
			os.Rename(filepath.Join(d, "objects"), filepath.Join(d, "objects.away"))
			return os.Symlink("/nonexistent-toh", filepath.Join(d, "objects"))
		}, []string{"an empty objects/"}, []string{"objects.toh-aside-"}},
		"refs a link to a file": {func(d string) error {
			os.RemoveAll(filepath.Join(d, "refs"))
			return os.Symlink("HEAD", filepath.Join(d, "refs"))
		}, []string{"an empty refs/"}, []string{"refs.toh-aside-"}},
	} {
		t.Run(name, func(t *testing.T) {
			d, fd := mk(t)
			if err := c.breakIt(d); err != nil {
				t.Fatal(err)
			}
			got, left := mendGitDir(fd, saved, 40)
			if !slices.Equal(got, c.fixed) || left != "" {
				t.Errorf("mended %q, left %q; want %q", got, left, c.fixed)
			}
			if !headValidAt(fd, 40) {
				t.Error("HEAD still invalid")
			}
			for _, sub := range []string{"objects", "refs"} {
				if fi, err := os.Stat(filepath.Join(d, sub)); err != nil || !fi.IsDir() {
					t.Errorf("%s is no directory: %v", sub, err)
				}
			}
			names, _ := os.ReadDir(d)
			for _, a := range c.aside {
				if !slices.ContainsFunc(names, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), a) }) {
					t.Errorf("nothing set aside as %s*: %v", a, names)
				}
			}
			for _, e := range names {
				if strings.HasPrefix(e.Name(), "HEAD.toh-restore-") {
					t.Errorf("the temporary HEAD is left: %s", e.Name())
				}
			}
		})
	}
}

// In a SHA-256 repository a 40-digit HEAD is no object name (found by review), and
// policy.GitObjectNameHex reads which one the config names.
func TestMendGitDirSHA256(t *testing.T) {
	d := t.TempDir()
	for _, sub := range []string{"objects", "refs"} {
		os.Mkdir(filepath.Join(d, sub), 0o755)
	}
	saved := []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n")
	os.WriteFile(filepath.Join(d, "config"), []byte("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectFormat = sha256\n"), 0o644)
	os.WriteFile(filepath.Join(d, "HEAD"), []byte("0123456789abcdef0123456789abcdef01234567\n"), 0o644)
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	hexsz := policy.GitObjectNameHex(d)
	if hexsz != 64 {
		t.Fatalf("GitObjectNameHex = %d, want 64", hexsz)
	}
	if got, left := mendGitDir(fd, saved, hexsz); len(got) != 1 || left != "" {
		t.Errorf("mended %q, left %q", got, left)
	}
	if b, _ := os.ReadFile(filepath.Join(d, "HEAD")); string(b) != string(saved) {
		t.Errorf("HEAD = %q", b)
	}
}
