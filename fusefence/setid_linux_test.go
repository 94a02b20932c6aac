package fusefence

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

const setIDHelper = "setid" // TOH_TEST_SUBPROCESS value of TestSetIDHelperProcess

// setIDOps change a file the way that makes Linux clear its set-ID bits for a
// caller without CAP_FSETID; each reaches the fence by another path (see
// killSetID). ptwrite creates its file, makes it set-ID and writes it again, as a
// passthrough writer where passthrough is available.
var setIDOps = []string{"ptwrite", "write", "rwwrite", "truncate", "ftruncate", "otrunc", "chown", "chgrp"}

// TestSetIDHelperProcess runs one of setIDOps on a path, as whoever started it:
// TestSetIDClearedAsOnHost starts it as an unprivileged caller.
func TestSetIDHelperProcess(t *testing.T) {
	if os.Getenv("TOH_TEST_SUBPROCESS") != setIDHelper {
		return
	}
	args := os.Args[slices.Index(os.Args, "--")+1:]
	if err := setIDOp(args[0], args[1], args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", args[0], args[1], err)
		os.Exit(1)
	}
	os.Exit(0)
}

func setIDOp(op, path, mode string) error {
	var m uint32
	fmt.Sscanf(mode, "%o", &m)
	write := func(flags int) error {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte("w"))
		return err
	}
	switch op {
	case "ptwrite":
		fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		// The first write finds nothing to clear: the kernel may stop checking
		// (S_NOSEC) until the attributes change, as the fchmod does.
		if _, err := unix.Write(fd, []byte("a")); err != nil {
			return err
		}
		if err := unix.Fchmod(fd, m); err != nil {
			return err
		}
		_, err = unix.Write(fd, []byte("b"))
		return err
	case "write":
		return write(unix.O_WRONLY)
	case "rwwrite":
		return write(unix.O_RDWR)
	case "truncate":
		return unix.Truncate(path, 1)
	case "ftruncate":
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Ftruncate(fd, 1)
	case "otrunc":
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	case "chown":
		return unix.Chown(path, -1, -1)
	case "chgrp":
		return unix.Chown(path, -1, os.Getegid())
	}
	return fmt.Errorf("unknown op %q", op)
}

// TestSetIDClearedAsOnHost: through the mount, a change of a set-user-ID or
// set-group-ID file clears those bits exactly where the same change of a host file
// by the same caller clears them: for an unprivileged caller (uid 65534) on every
// path a change takes to the fence, and for root, who keeps them (CAP_FSETID),
// except through a write-only descriptor (a documented limitation). The host's
// answer is the expectation; it must clear set-user-ID for the unprivileged
// caller, so a fence that kept the bits would fail here.
func TestSetIDClearedAsOnHost(t *testing.T) {
	testutil.RequireRoot(t)
	const uid, gid = 65534, 65534
	e := newEnv(t, policy.WorkspaceWrite, "dir src/u", "dir native", "dir bin")
	for _, d := range []string{e.base, e.src} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{e.s("u"), filepath.Join(e.base, "native")} {
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	// The test binary, where the unprivileged caller can run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(e.base, "bin", "fusefence.test")
	testutil.CopyExecutable(t, self, bin)
	run := func(cred *syscall.Credential, op, path string, mode uint32) error {
		cmd := exec.Command(bin, "-test.run=^TestSetIDHelperProcess$", "--", op, path, fmt.Sprintf("%o", mode))
		cmd.Env = append(os.Environ(), "TOH_TEST_SUBPROCESS="+setIDHelper)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	modeOf := func(path string) uint32 {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Mode & 0o7777
	}
	nobody := &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	modes := []uint32{0o4755, 0o2775, 0o2745, 0o6775}
	n := 0
	for _, who := range []struct {
		name string
		cred *syscall.Credential
	}{{"uid 65534", nobody}, {"root", nil}} {
		for _, op := range setIDOps {
			for _, mode := range modes {
				n++
				name := fmt.Sprintf("%d-%s", n, op)
				host, mnt := filepath.Join(e.base, "native", name), e.m("u/"+name)
				if op != "ptwrite" {
					for _, p := range []string{host, e.s("u/" + name)} {
						if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
							t.Fatal(err)
						}
						if err := os.Chown(p, uid, gid); err != nil {
							t.Fatal(err)
						}
						if err := unix.Chmod(p, mode); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := run(who.cred, op, host, mode); err != nil {
					t.Fatalf("%s: %s on the host: %v", who.name, op, err)
				}
				if err := run(who.cred, op, mnt, mode); err != nil {
					t.Errorf("%s: %s through the mount: %v", who.name, op, err)
					continue
				}
				want, got := modeOf(host), modeOf(e.s("u/"+name))
				if who.cred != nil && mode&unix.S_ISUID != 0 && want&unix.S_ISUID != 0 {
					t.Fatalf("%s: %s of a %04o file keeps set-user-ID on the host: this test checks nothing", who.name, op, mode)
				}
				if who.cred == nil && op == "write" {
					// Direct writes clear the bits for every writer (see killSetID).
					want = mode &^ killBits(mode)
				}
				if got != want {
					t.Errorf("%s: %s of a %04o file: %04o through the mount, %04o on the host", who.name, op, mode, got, want)
				}
			}
		}
	}
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("denials: %+v", recs)
	}
}
