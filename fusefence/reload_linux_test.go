package fusefence

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// TestPolicyReload switches the mode under a live mount: the next operation obeys,
// descriptors opened for writing before a tightening are judged again, and a
// malformed file denies every mutation until a valid one returns.
func TestPolicyReload(t *testing.T) {
	e := newEnv(t, policy.ReadOnly, baseTree...)
	create := func(name string) error { return writeAt(e.m(name), unix.O_CREAT|unix.O_WRONLY, name) }

	err := e.unchanged("create under read-only", func() error { return create("a") })
	e.expectDenial("create under read-only", err, "create", RuleReadOnly, "a")

	if err := policy.SetMode(e.policy, "", policy.WorkspaceWrite); err != nil {
		t.Fatal(err)
	}
	if err := create("a"); err != nil {
		t.Fatalf("create after switching to workspace-write: %v", err)
	}
	if err := want(e.s("a"), unix.S_IFREG|0o644, "a"); err != nil {
		t.Errorf("create after switching to workspace-write did not land: %v", err)
	}

	// A descriptor opened for writing while allowed, and a source to copy from.
	w, err := os.OpenFile(e.m("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := os.Open(e.m("d/g"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.WriteAt([]byte("J"), 0); err != nil {
		t.Fatalf("write while allowed: %v", err)
	}

	if err := policy.SetMode(e.policy, "", policy.ReadOnly); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, op string
		run      func() error
	}{
		{"write", "write", func() error { _, err := w.WriteAt([]byte("X"), 1); return err }},
		{"ftruncate", "truncate", func() error { return w.Truncate(0) }},
		{"fallocate", "fallocate", func() error { return unix.Fallocate(int(w.Fd()), 0, 0, 1<<20) }},
		{"copy_file_range", "copy_file_range", func() error {
			_, err := unix.CopyFileRange(int(r.Fd()), nil, int(w.Fd()), nil, 5, 0)
			return err
		}},
		{"create", "create", func() error { return create("b") }},
	} {
		err := e.unchanged(c.name+" after switching to read-only", c.run)
		path := "f"
		if c.op == "create" {
			path = "b"
		}
		e.expectDenial(c.name+" after switching to read-only", err, c.op, RuleReadOnly, path)
	}
	if err := want(e.s("f"), unix.S_IFREG|0o644, "Jello"); err != nil {
		t.Error(err)
	}

	// Malformed: every mutation fails, and reads still work.
	if err := os.WriteFile(e.policy, []byte(`{"version": 1, "mode": "workspace-write", "bogus": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		name, op, path string
		run            func() error
	}{
		{"create", "create", "c", func() error { return create("c") }},
		{"mkdir", "mkdir", "c", func() error { return unix.Mkdir(e.m("c"), 0o755) }},
		{"chmod", "chmod", "f", func() error { return unix.Chmod(e.m("f"), 0o600) }},
		{"unlink", "unlink", "f", func() error { return unix.Unlink(e.m("f")) }},
		{"write", "write", "f", func() error { _, err := w.WriteAt([]byte("X"), 1); return err }},
	} {
		err := e.unchanged(m.name+" under a malformed policy", m.run)
		e.expectDenial(m.name+" under a malformed policy", err, m.op, RulePolicyInvalid, m.path)
	}
	if b, err := os.ReadFile(e.m("f")); err != nil || string(b) != "Jello" {
		t.Errorf("read under a malformed policy: %q, %v", b, err)
	}

	// A valid file returns: mutations land again, through the old descriptor too.
	if err := os.WriteFile(e.policy, []byte(`{"version": 1, "mode": "workspace-write", "workspaceRoot": "`+e.src+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := create("c"); err != nil {
		t.Errorf("create after the policy was fixed: %v", err)
	}
	if _, err := w.WriteAt([]byte("Y"), 0); err != nil {
		t.Errorf("write after the policy was fixed: %v", err)
	}
	if err := errWant(want(e.s("c"), unix.S_IFREG|0o644, "c"), want(e.s("f"), unix.S_IFREG|0o644, "Yello")); err != nil {
		t.Errorf("mutations after the policy was fixed did not land: %v", err)
	}
}

func errWant(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// mmapHelper is the TOH_TEST_SUBPROCESS value of TestMmapWriteHelperProcess.
const mmapHelper = "mmap-write"

// TestMmapWriteHelperProcess maps the file named after "--" shared and writable,
// says "mapped" on stdout, waits for a line on stdin, then writes "MMAPX" through
// the mapping and msyncs it. It runs in a process of its own because a page fault
// on a file of a mount this process serves can deadlock it: the faulting goroutine
// cannot be stopped for a collection while it waits for the server, and the
// server's goroutines wait for the collection (a fusefence -race run hung so).
func TestMmapWriteHelperProcess(t *testing.T) {
	if os.Getenv("TOH_TEST_SUBPROCESS") != mmapHelper {
		return
	}
	path := os.Args[slices.Index(os.Args, "--")+1]
	fail := func(err error) { fmt.Println("failed:", err); os.Exit(1) }
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fail(err)
	}
	m, err := unix.Mmap(int(w.Fd()), 0, 5, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		fmt.Println("nomap:", err)
		os.Exit(0)
	}
	fmt.Println("mapped")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fail(err)
	}
	copy(m, "MMAPX")
	unix.Msync(m, unix.MS_SYNC)
	os.Exit(0)
}

// A write the kernel sends back from the page cache (msync of a shared writable
// mapping) carries PID 0; refused after a switch to read-only, it is recorded under
// the process that opened the file, not as the kernel's (found by review). The
// write is refused (the file keeps its content) either way. The mapping is made
// and written in a helper process (see TestMmapWriteHelperProcess).
func TestWritebackDenialNamesTheOpener(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, baseTree...)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestMmapWriteHelperProcess$", "--", e.m("f"))
	cmd.Env = append(os.Environ(), "TOH_TEST_SUBPROCESS="+mmapHelper)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	switch {
	case strings.HasPrefix(line, "nomap:"):
		t.Skipf("no shared writable mapping on this mount (%s)", strings.TrimSpace(line))
	case line != "mapped\n":
		t.Fatalf("the mapping helper said %q (%v)", line, err)
	}
	e.records()
	if err := policy.SetMode(e.policy, "", policy.ReadOnly); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the mapping helper: %v\n%s", err, rest)
	}
	if err := want(e.s("f"), unix.S_IFREG|0o644, "hello"); err != nil {
		t.Error(err)
	}
	var found bool
	for _, r := range e.records() {
		if r.Op == "write" && r.Path == "f" {
			found = true
			if r.PID != uint32(cmd.Process.Pid) || r.UID != uint32(os.Getuid()) {
				t.Errorf("writeback denial recorded as pid %d uid %d, want the opener %d/%d", r.PID, r.UID, cmd.Process.Pid, os.Getuid())
			}
		}
	}
	if !found {
		t.Errorf("no record of the refused writeback")
	}
}
