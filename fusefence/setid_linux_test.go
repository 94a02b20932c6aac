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
	"time"

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

// raceLoopHelper is the TOH_TEST_SUBPROCESS value of TestRaceLoopHelperProcess.
const raceLoopHelper = "race-loop"

// TestRaceLoopHelperProcess does OP on PATH again and again for DURATION, as
// whoever started it (args after "--": OP PATH STOP DURATION), stopping early once
// STOP exists. OP is "create" (open with O_CREAT for writing) or "lutimes" (set the
// times of PATH itself to 1970-01-02).
func TestRaceLoopHelperProcess(t *testing.T) {
	if os.Getenv("TOH_TEST_SUBPROCESS") != raceLoopHelper {
		return
	}
	args := os.Args[slices.Index(os.Args, "--")+1:]
	op, path, stop := args[0], args[1], args[2]
	d, _ := time.ParseDuration(args[3])
	ts := []unix.Timespec{{Sec: 86400}, {Sec: 86400}}
	end := time.Now().Add(d)
	for i := 0; i == 0 || time.Now().Before(end); i++ {
		switch op {
		case "create":
			if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_CLOEXEC, 0o644); err == nil {
				unix.Close(fd)
			}
		case "lutimes":
			unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		if i%256 == 0 && stop != "" {
			if _, err := os.Lstat(stop); err == nil {
				break
			}
		}
	}
	os.Exit(0)
}

// raceAsCaller runs TestRaceLoopHelperProcess as uid:uid from a copy of the test
// binary in dir (where the caller can run it), while swap runs in a loop on the
// host; it returns how many swaps succeeded.
func raceAsCaller(t *testing.T, dir string, uid uint32, swap func() error, op, path, stop string, d time.Duration) int {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "fusefence.test")
	if _, err := os.Stat(bin); err != nil {
		testutil.CopyExecutable(t, self, bin)
	}
	done := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				swapped <- n
				return
			default:
			}
			if swap != nil && swap() == nil {
				n++
			}
		}
	}()
	cmd := exec.Command(bin, "-test.run=^TestRaceLoopHelperProcess$", "--", op, path, stop, d.String())
	cmd.Env = append(os.Environ(), "TOH_TEST_SUBPROCESS="+raceLoopHelper)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	close(done)
	n := <-swapped
	if err != nil {
		t.Fatalf("the caller's loop: %v\n%s", err, out)
	}
	return n
}

// raceTime is how long the race tests below race: 5 s, or TOH_STRESS's time.
func raceTime(t *testing.T) time.Duration {
	if d := stressTime(t); d > 0 {
		return d
	}
	return 5 * time.Second
}

// TestCreateRaceCannotMakeFilesWhereTheCallerCannot: a name the kernel saw as
// missing but that exists on the host when the CREATE arrives (made there since) is
// looked up again (ESTALE), never opened as it is by then: a caller who swapped the
// name on the host between a file and a link to a directory it cannot write had the
// file made there by the root daemon, and given to it (found by review). The host
// side swaps ws/x between a file of the caller's and an absolute link to
// ws/rootdir/made (rootdir root's, 0755) while the caller, uid 65534, opens ws/x
// with O_CREAT through the mount in a loop; rootdir/made must never appear.
// Control: the caller cannot create in rootdir directly. The default run races
// for 5 s (TOH_STRESS: longer), which found the bug, with the fix reverted, in
// each of three tries.
func TestCreateRaceCannotMakeFilesWhereTheCallerCannot(t *testing.T) {
	testutil.RequireRoot(t)
	const uid = 65534
	// No kernel cache: every open looks the name up, so each try can meet the race
	// (with the default second, the kernel mostly opened the file it had cached).
	e := newEnvTimeout(t, policy.WorkspaceWrite, -1, "dir src/ws/rootdir", "dir bin")
	for _, d := range []string{e.base, e.src, e.s("ws/rootdir"), filepath.Join(e.base, "bin")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(e.s("ws"), uid, uid); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(e.base, "bin")
	made := e.s("ws/rootdir/made")
	raceAsCaller(t, bin, uid, nil, "create", e.m("ws/rootdir/direct"), "", 0)
	if _, err := os.Lstat(e.s("ws/rootdir/direct")); err == nil {
		t.Fatal("control: the caller created in rootdir directly")
	}
	if err := os.Symlink(made, e.s("ws/y")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.s("ws/x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{e.s("ws/x"), e.s("ws/y")} {
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	swap := func() error {
		return unix.Renameat2(unix.AT_FDCWD, e.s("ws/x"), unix.AT_FDCWD, e.s("ws/y"), unix.RENAME_EXCHANGE)
	}
	n := raceAsCaller(t, bin, uid, swap, "create", e.m("ws/x"), made, raceTime(t))
	if _, err := os.Lstat(made); err == nil {
		t.Fatalf("the caller had a file made in rootdir, which it cannot write (%d swaps)", n)
	}
	if n == 0 {
		t.Fatal("the host side never swapped: the test proves nothing")
	}
}

// TestSymlinkTimesRaceCannotTouchAnotherFile: a symlink's own times are set through
// the descriptor the fence checked, never by name: by name, a caller who swapped
// its link on the host with a root-owned file in a directory of its own outside
// every root had that file's times set (found by review). The caller, uid 65534,
// sets its link's times through the mount in a loop while the host side exchanges
// the link with the victim; the victim's times must never change. Controls: the
// link's own times are set when nothing races, and the caller cannot set the
// victim's times directly.
func TestSymlinkTimesRaceCannotTouchAnotherFile(t *testing.T) {
	testutil.RequireRoot(t)
	const uid = 65534
	e := newEnvTimeout(t, policy.WorkspaceWrite, -1, "dir src/ws", "file outside/mine/victim root's", "dir bin")
	for _, d := range []string{e.base, e.src, e.outside, filepath.Join(e.base, "bin")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{e.s("ws"), filepath.Join(e.outside, "mine")} {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	victim := filepath.Join(e.outside, "mine", "victim")
	old := []unix.Timespec{{Sec: 978307200}, {Sec: 978307200}} // 2001-01-01
	if err := unix.UtimesNano(victim, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target", e.s("ws/lnk")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(e.s("ws/lnk"), uid, uid); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(e.base, "bin")
	mtime := func(p string) int64 {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Mtim.Sec
	}
	raceAsCaller(t, bin, uid, nil, "lutimes", e.m("ws/lnk"), "", 0)
	if got := mtime(e.s("ws/lnk")); got != 86400 {
		t.Fatalf("control: the link's own times were not set through the mount (mtime %d)", got)
	}
	raceAsCaller(t, bin, uid, nil, "lutimes", victim, "", 0)
	if got := mtime(victim); got != old[1].Sec {
		t.Fatalf("control: the caller set root's file's times directly")
	}
	swap := func() error {
		return unix.Renameat2(unix.AT_FDCWD, e.s("ws/lnk"), unix.AT_FDCWD, victim, unix.RENAME_EXCHANGE)
	}
	n := raceAsCaller(t, bin, uid, swap, "lutimes", e.m("ws/lnk"), "", raceTime(t))
	for _, p := range []string{victim, e.s("ws/lnk")} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mtim.Sec != old[1].Sec {
			t.Fatalf("root's file's times changed to %d (%d swaps)", st.Mtim.Sec, n)
		}
	}
	if n == 0 {
		t.Fatal("the host side never swapped: the test proves nothing")
	}
}
