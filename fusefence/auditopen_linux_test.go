package fusefence

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The audit log is where another user could otherwise choose what a root daemon
// writes, or forge its records (found by review): a link at its name, a log of
// another user's, one with two names or writable by others, a directory above it
// others can rename in, another user's link on the way, and a FIFO are each
// refused, with nothing created or written (negative controls); a new log in a
// private or a sticky directory, or through the daemon's own link, and an existing
// log of its own, are opened and written (positive controls).
func TestAuditLogOthersCannotChooseOrRewrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root: files of another user")
	}
	base := auditDir(t)
	mk := func(rel string, mode uint32) string {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, mode); err != nil { // os.Chmod takes no 0o1000 for sticky
			t.Fatal(err)
		}
		return p
	}
	private, sticky, groupw := mk("private", 0o700), mk("sticky", 0o1777), mk("groupw", 0o775)
	victim := filepath.Join(private, "victim")
	write := func(p string, mode os.FileMode, uid int) string {
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.Symlink(victim, filepath.Join(sticky, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(sticky, "link"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	theirs := write(filepath.Join(sticky, "theirs"), 0o600, 65534)
	loose := write(filepath.Join(private, "loose"), 0o622, 0)
	twice := write(filepath.Join(private, "twice"), 0o600, 0)
	if err := os.Link(twice, filepath.Join(private, "twice2")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(private, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Another user's link to a directory, on the way: they could point it at a
	// directory of theirs at any moment (found by review).
	theirDir := filepath.Join(sticky, "logs")
	if err := os.Symlink(private, theirDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(theirDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	myDir := filepath.Join(sticky, "mylogs")
	if err := os.Symlink(private, myDir); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(sticky, "link"), "symbolic link"},
		{theirs, "owned by uid 65534"},
		{loose, "chmod go-w"},
		{twice, "2 names"},
		{filepath.Join(groupw, "new.jsonl"), "could be replaced by another user"},
		{filepath.Join(private, "fifo"), "opening audit log"},
		{filepath.Join(theirDir, "via-theirs.jsonl"), "the symlink " + theirDir},
	} {
		done := make(chan error, 1)
		go func() {
			a, err := OpenAudit(c.path)
			if err == nil {
				a.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("OpenAudit(%s) = %v, want an error saying %q", c.path, err, c.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("OpenAudit(%s) hangs", c.path)
		}
	}
	if _, err := os.Lstat(victim); !os.IsNotExist(err) {
		t.Errorf("the link's target was created: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(groupw, "new.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a log was created in a group-writable directory: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(private, "via-theirs.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a log was created through another user's link: %v", err)
	}
	for _, p := range []string{theirs, loose, twice} {
		if fi, err := os.Stat(p); err != nil || fi.Size() != 0 {
			t.Errorf("%s was written: %v", p, err)
		}
	}

	own := write(filepath.Join(private, "own.jsonl"), 0o600, 0)
	for _, p := range []string{filepath.Join(private, "new.jsonl"), filepath.Join(sticky, "new.jsonl"), own, filepath.Join(myDir, "via-mine.jsonl")} {
		a, err := OpenAudit(p)
		if err != nil {
			t.Errorf("OpenAudit(%s): %v", p, err)
			continue
		}
		a.Log(Event{Op: "create", Path: "x", Rule: RuleOutside})
		if err := a.Close(); err != nil {
			t.Errorf("closing %s: %v", p, err)
		}
		if data, err := os.ReadFile(p); err != nil || strings.Count(string(data), `"rule":"outside-writable-roots"`) != 1 {
			t.Errorf("%s holds %q (%v), want one record", p, data, err)
		}
	}
}
