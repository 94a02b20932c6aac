package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// validHead follows git's validate_headref: a symbolic ref into refs/, or an object
// name at the start.
func TestValidHead(t *testing.T) {
	for head, want := range map[string]bool{
		"ref: refs/heads/main\n":                     true,
		"ref:refs/heads/x":                           true,
		"ref: \t refs/tags/v1":                       true,
		"0123456789abcdef0123456789ABCDEF01234567\n": true,
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n": true,
		"ref: heads/main":                          false,
		"ref: /etc/passwd":                         false,
		"0123456789abcdef0123456789abcdef0123456":  false, // 39 digits
		"0123456789abcdef0123456789abcdef0123456g": false,
		"":          false,
		"not a ref": false,
	} {
		if got := validHead([]byte(head)); got != want {
			t.Errorf("validHead(%q) = %v, want %v", head, got, want)
		}
	}
}

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
		aside   []string
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
		}, []string{`HEAD ("ref: refs/heads/main")`}, []string{"HEAD.toh-aside"}},
		"refs missing": {func(d string) error { return os.RemoveAll(filepath.Join(d, "refs")) }, []string{"an empty refs/"}, nil},
		"objects a file": {func(d string) error {
			os.RemoveAll(filepath.Join(d, "objects"))
			return os.WriteFile(filepath.Join(d, "objects"), nil, 0o644)
		}, []string{"an empty objects/"}, []string{"objects.toh-aside"}},
	} {
		t.Run(name, func(t *testing.T) {
			d, fd := mk(t)
			if err := c.breakIt(d); err != nil {
				t.Fatal(err)
			}
			if got := mendGitDir(fd, saved); !slices.Equal(got, c.fixed) {
				t.Errorf("mended %q, want %q", got, c.fixed)
			}
			if !headValidAt(fd) {
				t.Error("HEAD still invalid")
			}
			for _, sub := range []string{"objects", "refs"} {
				if fi, err := os.Stat(filepath.Join(d, sub)); err != nil || !fi.IsDir() {
					t.Errorf("%s is no directory: %v", sub, err)
				}
			}
			for _, a := range c.aside {
				if _, err := os.Lstat(filepath.Join(d, a)); err != nil {
					t.Errorf("%s not set aside: %v", a, err)
				}
			}
			if _, err := os.Lstat(filepath.Join(d, "HEAD.toh-restore")); err == nil {
				t.Error("the temporary HEAD is left")
			}
		})
	}
}
