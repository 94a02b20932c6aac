package fusefence

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// TestPassthroughReads: a file open for reading is read by the kernel from the host
// file, can never be written through, and changes the way other opens of the same
// file work (see ioMode): a write-only open still goes through the fence, a
// read-write one is refused until the readers close.
func TestPassthroughReads(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "file src/f hello")
	if !e.fence.f.passthrough.Load() {
		t.Skip("passthrough unavailable (needs root and Linux 6.9): reads use the page cache")
	}
	r, err := os.Open(e.m("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	// The reader cannot write, through write(2) or a shared mapping.
	if _, err := unix.Pwrite(int(r.Fd()), []byte("X"), 0); !errors.Is(err, unix.EBADF) {
		t.Errorf("pwrite through a passthrough reader: %v, want EBADF", err)
	}
	if m, err := unix.Mmap(int(r.Fd()), 0, 5, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, unix.EACCES) {
		if err == nil {
			unix.Munmap(m)
		}
		t.Errorf("writable shared mmap of a passthrough reader: %v, want EACCES", err)
	}

	// Outside changes are read at once: the kernel reads the host file.
	if err := os.WriteFile(e.s("f"), []byte("jello"), 0o644); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := r.ReadAt(buf, 0); string(buf[:n]) != "jello" {
		t.Errorf("read after an outside change: %q, %v", buf[:n], err)
	}

	// A write-only open beside the reader is fenced: it lands while allowed, and is
	// judged again after the policy tightens.
	w, err := os.OpenFile(e.m("f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("write-only open beside a passthrough reader: %v", err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("+1")); err != nil {
		t.Fatalf("write beside a passthrough reader: %v", err)
	}
	if n, _ := r.ReadAt(buf, 0); string(buf[:n]) != "jello+1" {
		t.Errorf("the reader sees %q after the write, want %q", buf[:n], "jello+1")
	}
	if err := policy.SetMode(e.policy, "", policy.ReadOnly); err != nil {
		t.Fatal(err)
	}
	err = e.unchanged("write beside a reader after switching to read-only", func() error {
		_, err := w.Write([]byte("+2"))
		return err
	})
	e.expectDenial("write beside a reader after switching to read-only", err, "write", RuleReadOnly, "f")
	if err := policy.SetMode(e.policy, "", policy.WorkspaceWrite); err != nil {
		t.Fatal(err)
	}

	// A read-write open is refused while the reader is open, and works after.
	err = e.unchanged("read-write open beside a passthrough reader", func() error {
		f, err := os.OpenFile(e.m("f"), os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		return err
	})
	if !errors.Is(err, unix.ETXTBSY) {
		t.Errorf("read-write open beside a passthrough reader: %v, want ETXTBSY", err)
	}
	r.Close()
	w.Close()
	// RELEASE reaches the daemon after close(2) returned.
	deadline := time.Now().Add(2 * time.Second)
	for {
		f, err := os.OpenFile(e.m("f"), os.O_RDWR, 0)
		if err == nil {
			_, err = f.WriteAt([]byte("J"), 0)
			f.Close()
			if err != nil {
				t.Fatalf("write through a read-write file: %v", err)
			}
			break
		}
		if !errors.Is(err, unix.ETXTBSY) || time.Now().After(deadline) {
			t.Fatalf("read-write open after the readers closed: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := want(e.s("f"), unix.S_IFREG|0o644, "Jello+1"); err != nil {
		t.Error(err)
	}
}

// TestDirectWriteClearsSetID: a write through a write-only descriptor (FOPEN_DIRECT_IO,
// where the kernel leaves it to the file system) clears set-user-ID, and set-group-ID
// on a group-executable file, as a write on the host would.
func TestDirectWriteClearsSetID(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "file src/suid x", "file src/sgid x", "file src/sgid-nox x", "file src/plain x")
	for name, mode := range map[string]uint32{"suid": 0o4755, "sgid": 0o2775, "sgid-nox": 0o2745, "plain": 0o755} {
		if err := os.Chmod(e.s(name), os.FileMode(mode&0o777)|setIDBits(mode)); err != nil {
			t.Fatal(err)
		}
	}
	for name, wantMode := range map[string]uint32{"suid": 0o755, "sgid": 0o775, "sgid-nox": 0o2745, "plain": 0o755} {
		if err := writeAt(e.m(name), unix.O_WRONLY, "y"); err != nil {
			t.Errorf("write to %s: %v", name, err)
			continue
		}
		if err := want(e.s(name), unix.S_IFREG|wantMode, "y"); err != nil {
			t.Error(err)
		}
	}
}

func setIDBits(mode uint32) os.FileMode {
	var m os.FileMode
	if mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	return m
}

// TestPassthroughWriterOfCreatedFile pins what a write-only file its own open
// created gives up (see ioWriter): the kernel writes it to the host file without
// asking the fence, so after a tightening that descriptor keeps writing, while
// everything that still reaches the fence is judged under the new policy: a new
// open for writing, a new file, ftruncate through that very descriptor, and a
// write through a descriptor of a file that existed before its open.
func TestPassthroughWriterOfCreatedFile(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "file src/f hello")
	if !e.fence.f.passthrough.Load() {
		t.Skip("passthrough unavailable (needs root and Linux 6.9): every write is a WRITE request")
	}
	w, err := os.OpenFile(e.m("new"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	old, err := os.OpenFile(e.m("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := w.Write([]byte("abc")); err != nil {
		t.Fatalf("write to the new file: %v", err)
	}
	if err := want(e.s("new"), unix.S_IFREG|0o644, "abc"); err != nil {
		t.Errorf("write to the new file did not land: %v", err)
	}
	// A reader joins the writer's backing file and sees what it wrote at once.
	r, err := os.Open(e.m("new"))
	if err != nil {
		t.Fatalf("read-only open beside a passthrough writer: %v", err)
	}
	defer r.Close()
	buf := make([]byte, 16)
	if n, err := r.ReadAt(buf, 0); string(buf[:n]) != "abc" {
		t.Errorf("reader beside the writer: %q, %v", buf[:n], err)
	}

	if err := policy.SetMode(e.policy, "", policy.ReadOnly); err != nil {
		t.Fatal(err)
	}
	// The decision: the creating descriptor keeps writing, unaudited.
	if _, err := w.Write([]byte("def")); err != nil {
		t.Errorf("write through the creating descriptor after switching to read-only: %v (passthrough writers are not judged again)", err)
	}
	if err := want(e.s("new"), unix.S_IFREG|0o644, "abcdef"); err != nil {
		t.Error(err)
	}
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("a passthrough write logged denials: %+v", recs)
	}
	// Everything else is judged under the new policy.
	err = e.unchanged("ftruncate of the new file after switching to read-only", func() error { return w.Truncate(0) })
	e.expectDenial("ftruncate of the new file after switching to read-only", err, "truncate", RuleReadOnly, "new")
	err = e.unchanged("open of the new file for writing after switching to read-only", func() error {
		return writeAt(e.m("new"), unix.O_WRONLY, "X")
	})
	e.expectDenial("open of the new file for writing after switching to read-only", err, "open", RuleReadOnly, "new")
	err = e.unchanged("create after switching to read-only", func() error {
		return writeAt(e.m("other"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, "X")
	})
	e.expectDenial("create after switching to read-only", err, "create", RuleReadOnly, "other")
	err = e.unchanged("write through a descriptor of an existing file after switching to read-only", func() error {
		_, err := old.Write([]byte("X"))
		return err
	})
	e.expectDenial("write through a descriptor of an existing file after switching to read-only", err, "write", RuleReadOnly, "f")
	if err := errWant(want(e.s("new"), unix.S_IFREG|0o644, "abcdef"), want(e.s("f"), unix.S_IFREG|0o644, "hello")); err != nil {
		t.Error(err)
	}

	// While the passthrough writer is open, a read-write open of its file is refused.
	if err := policy.SetMode(e.policy, "", policy.WorkspaceWrite); err != nil {
		t.Fatal(err)
	}
	err = e.unchanged("read-write open beside a passthrough writer", func() error {
		f, err := os.OpenFile(e.m("new"), os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		return err
	})
	if !errors.Is(err, unix.ETXTBSY) {
		t.Errorf("read-write open beside a passthrough writer: %v, want ETXTBSY", err)
	}
}

// TestReopenAfterPassthroughWriter: a file written by a fresh write-only create
// (a passthrough writer) and closed can be opened read-write at once. The kernel
// drops the writer at close(2), but the daemon learns it from a RELEASE that
// another reader may still be serving when the OPEN arrives; without waiting for
// it, the open failed with ETXTBSY (in 2 to 16 of 30 runs of go-fuse's posix tests
// through toh-mount).
func TestReopenAfterPassthroughWriter(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite)
	if !e.fence.f.passthrough.Load() {
		t.Skip("no passthrough here: no passthrough writer to wait for")
	}
	failed := 0
	for i := range 300 {
		name := e.m(fmt.Sprintf("f%d", i))
		if err := os.WriteFile(name, []byte("content"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			failed++
			continue
		}
		f.Close()
	}
	if failed > 0 {
		t.Errorf("%d of 300 read-write opens right after the creating writer closed failed", failed)
	}
}
