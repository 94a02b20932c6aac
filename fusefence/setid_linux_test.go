package fusefence

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// TestSetIDHelperProcess runs setIDOps, given as triples (op, path, octal mode)
// after "--", as whoever started it: TestSetIDClearedAsOnHost starts it as an
// unprivileged caller, once for all the host's files and once for the mount's
// (a race-built test binary takes most of a second to start). Each failure is one
// line "failed PATH: ERROR" on stdout.
func TestSetIDHelperProcess(t *testing.T) {
	if os.Getenv("TOH_TEST_SUBPROCESS") != setIDHelper {
		return
	}
	args := os.Args[slices.Index(os.Args, "--")+1:]
	for i := 0; i+2 < len(args); i += 3 {
		if err := setIDOp(args[i], args[i+1], args[i+2]); err != nil {
			fmt.Printf("failed %s: %s: %v\n", args[i+1], args[i], err)
		}
	}
	os.Exit(0)
}

// setIDCase is one op of setIDOps on a file of one mode, made on the host (host)
// and through the mount (mnt, which is src on the host).
type setIDCase struct {
	op             string
	mode           uint32
	host, src, mnt string
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
	// run runs the cases' ops on the paths where (host or mount) picks, as cred (nil:
	// as root, in this process), and returns the failures by path.
	run := func(cred *syscall.Credential, cases []setIDCase, where func(setIDCase) string) map[string]string {
		failed := map[string]string{}
		if cred == nil {
			for _, c := range cases {
				if err := setIDOp(c.op, where(c), fmt.Sprintf("%o", c.mode)); err != nil {
					failed[where(c)] = fmt.Sprintf("%s: %v", c.op, err)
				}
			}
			return failed
		}
		args := []string{"-test.run=^TestSetIDHelperProcess$", "--"}
		for _, c := range cases {
			args = append(args, c.op, where(c), fmt.Sprintf("%o", c.mode))
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "TOH_TEST_SUBPROCESS="+setIDHelper)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("running the set-ID helper as uid %d: %v", cred.Uid, err)
		}
		for line := range strings.Lines(string(out)) {
			if rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "failed "); ok {
				path, msg, _ := strings.Cut(rest, ": ")
				failed[path] = msg
			}
		}
		return failed
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
		var cases []setIDCase
		for _, op := range setIDOps {
			for _, mode := range modes {
				n++
				name := fmt.Sprintf("%d-%s", n, op)
				c := setIDCase{op: op, mode: mode, host: filepath.Join(e.base, "native", name), src: e.s("u/" + name), mnt: e.m("u/" + name)}
				if op != "ptwrite" {
					for _, p := range []string{c.host, c.src} {
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
				cases = append(cases, c)
			}
		}
		hostFailed := run(who.cred, cases, func(c setIDCase) string { return c.host })
		mntFailed := run(who.cred, cases, func(c setIDCase) string { return c.mnt })
		for _, c := range cases {
			if msg, ok := hostFailed[c.host]; ok {
				t.Fatalf("%s: on the host: %s", who.name, msg)
			}
			if msg, ok := mntFailed[c.mnt]; ok {
				t.Errorf("%s: through the mount: %s", who.name, msg)
				continue
			}
			want, got := modeOf(c.host), modeOf(c.src)
			if who.cred != nil && c.mode&unix.S_ISUID != 0 && want&unix.S_ISUID != 0 {
				t.Fatalf("%s: %s of a %04o file keeps set-user-ID on the host: this test checks nothing", who.name, c.op, c.mode)
			}
			if who.cred == nil && c.op == "write" {
				// Direct writes clear the bits for every writer (see killSetID).
				want = c.mode &^ killBits(c.mode)
			}
			if got != want {
				t.Errorf("%s: %s of a %04o file: %04o through the mount, %04o on the host", who.name, c.op, c.mode, got, want)
			}
		}
	}
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("denials: %+v", recs)
	}
}

// TestNewEntriesAreTheCallersFromTheStart: a root daemon makes every entry an
// unprivileged caller creates that caller's (a set-group-ID directory's group where
// the parent is one), and makes directories, nodes and symlinks with the caller's
// file-system ids rather than as root followed by a chown by name: a caller who
// could rename in the host directory once swapped a root-owned file from outside
// the roots in between the two (RENAME_EXCHANGE) and was given it. The race itself
// is timing; this checks that no root-owned window is left for the name-based
// entries: the daemon's threads never chown them (the host's owners are set at
// creation, so their ctime equals their birth). Control: the same ops by root make
// root's entries.
func TestNewEntriesAreTheCallersFromTheStart(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	const uid, gid, sgGID = 65534, 65534, 4242
	e := newEnv(t, policy.WorkspaceWrite)
	for _, d := range []string{e.base, e.src} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := `cd "$1" && mkdir d && mkfifo p && ln -s target s && : > f && mkdir sg/d && : > sg/f && ln -s t sg/s`
	for i, who := range []struct {
		name     string
		argv     []string
		uid, gid uint32
	}{
		{"uid 65534", []string{"setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), "--clear-groups", "sh", "-c", script, "sh"}, uid, gid},
		{"root", []string{"sh", "-c", script, "sh"}, 0, 0},
	} {
		dir := fmt.Sprintf("u%d", i)
		for _, d := range []struct {
			name string
			gid  int
			mode uint32
		}{{dir, 0, 0o777}, {dir + "/sg", sgGID, 0o2777}} {
			if err := os.Mkdir(e.s(d.name), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(e.s(d.name), 0, d.gid); err != nil {
				t.Fatal(err)
			}
			if err := unix.Chmod(e.s(d.name), d.mode); err != nil {
				t.Fatal(err)
			}
		}
		out, err := exec.Command(who.argv[0], append(who.argv[1:], e.m(dir))...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", who.name, err, out)
		}
		for _, name := range []string{"d", "p", "s", "f", "sg/d", "sg/f", "sg/s"} {
			wantGID := who.gid
			if strings.HasPrefix(name, "sg/") {
				wantGID = sgGID
			}
			if err := owner(e.s(dir+"/"+name), who.uid, wantGID); err != nil {
				t.Errorf("%s: %v", who.name, err)
			}
		}
		for _, name := range []string{"d", "p", "s", "sg/d", "sg/s"} {
			var sx unix.Statx_t
			err := unix.Statx(unix.AT_FDCWD, e.s(dir+"/"+name), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME|unix.STATX_CTIME, &sx)
			if err != nil || sx.Mask&unix.STATX_BTIME == 0 {
				t.Logf("%s: no birth time on this file system (%v): cannot tell a chown after the create", name, err)
				continue
			}
			if sx.Ctime != sx.Btime {
				t.Errorf("%s: %s changed after it was made (ctime %v, birth %v): owned by root first, then chowned", who.name, name, sx.Ctime, sx.Btime)
			}
		}
		var st unix.Stat_t
		if err := unix.Stat(e.s(dir+"/sg/d"), &st); err != nil || st.Mode&unix.S_ISGID == 0 {
			t.Errorf("%s: a directory made in a set-group-ID directory: mode %o, %v; want it set-group-ID too", who.name, st.Mode, err)
		}
	}
}
