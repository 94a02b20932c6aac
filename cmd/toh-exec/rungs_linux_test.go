package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
)

// requireRung skips (or fails, where required) unless the named Linux rung can run
// here; landlockABI is the least Landlock ABI the test needs.
func requireRung(t *testing.T, rung string, landlockABI int) {
	t.Helper()
	if rung == "bwrap" {
		testutil.RequireBwrap(t)
	} else {
		testutil.RequireLandlockABI(t, landlockABI)
	}
}

// A file effect of SPEC §1 and how to see that it happened.
type effect struct {
	name   string
	script string // run with $D the directory under test; must exit non-zero when refused
	landed func(d string) bool
	root   bool // only meaningful as root
	meta   bool // a metadata change (mode, owner, times, xattrs)
}

func fileEffects() []effect {
	exists := func(name string) func(string) bool {
		return func(d string) bool { _, err := os.Lstat(filepath.Join(d, name)); return err == nil }
	}
	gone := func(name string) func(string) bool {
		return func(d string) bool { _, err := os.Lstat(filepath.Join(d, name)); return err != nil }
	}
	content := func(want string) func(string) bool {
		return func(d string) bool { b, _ := os.ReadFile(filepath.Join(d, "f")); return string(b) == want }
	}
	st := func(d string) syscall.Stat_t {
		var s syscall.Stat_t
		syscall.Lstat(filepath.Join(d, "f"), &s)
		return s
	}
	return []effect{
		{"create", `echo new > "$D/new"`, exists("new"), false, false},
		{"write", `echo more >> "$D/f"`, content("orig\nmore\n"), false, false},
		{"truncate", `truncate -s 0 "$D/f"`, content(""), false, false},
		{"unlink", `rm "$D/f"`, gone("f"), false, false},
		{"rename", `mv "$D/f" "$D/g"`, exists("g"), false, false},
		{"mkdir", `mkdir "$D/sub"`, exists("sub"), false, false},
		{"rmdir", `rmdir "$D/empty"`, gone("empty"), false, false},
		{"symlink", `ln -s /etc/passwd "$D/sym"`, exists("sym"), false, false},
		{"link", `ln "$D/f" "$D/hard"`, exists("hard"), false, false},
		{"mkfifo", `mkfifo "$D/fifo"`, exists("fifo"), false, false},
		{"chmod", `chmod 0600 "$D/f"`, func(d string) bool { return st(d).Mode&0o777 == 0o600 }, false, true},
		// Confined commands hold no capability, so even root can only change the group
		// of a file it owns to one it is in: effectDir makes the file root:65534 and
		// the command moves it back to group 0.
		{"chown", `chgrp 0 "$D/f"`, func(d string) bool { return st(d).Gid == 0 }, true, true},
		{"utimes", `touch -d 2001-01-01 "$D/f"`, func(d string) bool { return st(d).Mtim.Sec < 1e9 }, false, true},
		{"setxattr", `setfattr -n user.toh -v 1 "$D/f"`, func(d string) bool {
			_, err := syscall.Getxattr(filepath.Join(d, "f"), "user.toh", make([]byte, 8))
			return err == nil
		}, false, true},
	}
}

// effectDir makes a fresh directory holding the fixture every effect starts from.
func effectDir(t *testing.T, parent, name string) string {
	t.Helper()
	d := filepath.Join(parent, name)
	testutil.MakeTree(t, parent, "dir "+name, "file "+name+"/f orig\n", "dir "+name+"/empty")
	os.Chmod(filepath.Join(d, "f"), 0o644)
	if os.Geteuid() == 0 {
		if err := os.Lchown(filepath.Join(d, "f"), 0, 65534); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func snapshot(t *testing.T, d string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		s := fi.Sys().(*syscall.Stat_t)
		data, _ := os.ReadFile(p)
		xa := make([]byte, 64)
		n, _ := syscall.Getxattr(p, "user.toh", xa)
		if n < 0 {
			n = 0
		}
		fmt.Fprintf(&b, "%s %o %d:%d %d %d.%d %q %q\n", p, fi.Mode(), s.Uid, s.Gid, s.Ino, s.Mtim.Sec, s.Mtim.Nsec, data, xa[:n])
		return nil
	})
	return b.String()
}

// TestEveryFileEffectPerRung runs each file effect of SPEC §1 through the built
// binary on each Linux rung: read-only refuses it (nothing under the directory changed,
// the dialect was spoken, denied=true), workspace-write lands it inside the root
// (positive control) and refuses it beside the root where the rung reports full.
func TestEveryFileEffectPerRung(t *testing.T) {
	for _, rung := range []string{"bwrap", "landlock"} {
		t.Run(rung, func(t *testing.T) {
			requireRung(t, rung, 1)
			dialect := map[string]string{"bwrap": "read-only file system", "landlock": "permission denied"}[rung]
			for _, ef := range fileEffects() {
				t.Run(ef.name, func(t *testing.T) {
					if ef.root && os.Geteuid() != 0 {
						t.Skip("an unprivileged user can only chown to itself: nothing observable to deny")
					}
					s := newScratch(t)
					run := func(mode, dir string) envelope {
						env := []string{"D=" + dir}
						e, _ := tohJSON(t, s.ws, env, "--policy", s.noPolicy, "--runner", rung, "--mode", mode, "--probe-cache", filepath.Join(s.beside, "cache.json"), "-c", ef.script)
						return e
					}
					ro := effectDir(t, s.ws, "ro")
					before := snapshot(t, ro)
					e := run("read-only", ro)
					if ef.landed(ro) || snapshot(t, ro) != before {
						t.Fatalf("read-only let %s land", ef.name)
					}
					if e.Result == nil || !e.Result.Denied || !strings.Contains(strings.ToLower(*e.Stderr), dialect) {
						t.Fatalf("read-only %s: facts %+v stderr %q", ef.name, e.Result, *e.Stderr)
					}
					in := effectDir(t, s.ws, "in")
					e = run("workspace-write", in)
					if e.Result == nil || e.Result.Denied || *e.Result.ExitCode != 0 || !ef.landed(in) {
						t.Fatalf("workspace-write inside the root: %s did not land: %+v %q", ef.name, e.Result, *e.Stderr)
					}
					out := effectDir(t, s.beside, "out")
					before = snapshot(t, out)
					e = run("workspace-write", out)
					// Under Landlock, workspace-write is partial: metadata changes beside
					// the roots are not governed (documented in sandbox). Content, name
					// and existence changes are, on every rung.
					governed := e.Result.Enforcement == "full" || !ef.meta
					if e.Result.Enforcement != "full" && (e.Result.Enforcement != "partial" || rung != "landlock") {
						t.Fatalf("enforcement %q", e.Result.Enforcement)
					}
					if governed && (ef.landed(out) || snapshot(t, out) != before || !e.Result.Denied) {
						t.Fatalf("workspace-write beside the root let %s land (%+v)", ef.name, e.Result)
					}
					s.checkCanary(t)
				})
			}
		})
	}
}

func TestLandlockWorkspaceWriteIsPartialAndRequireFullRefusesIt(t *testing.T) {
	testutil.RequireLandlockABI(t, 1)
	s := newScratch(t)
	target := filepath.Join(s.ws, "ran")
	e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "landlock", "--mode", "workspace-write", "--require-full", "--", "touch", target)
	if r.code != exitEnforcement || e.Error == nil || e.Error.Code != "ENFORCEMENT_PARTIAL" {
		t.Fatalf("--require-full: %d %+v", r.code, e.Error)
	}
	absent(t, target)
	e, r = tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "landlock", "--mode", "workspace-write", "--", "touch", target)
	if r.code != 0 || e.Result.Enforcement != "partial" {
		t.Fatalf("without --require-full: %d %+v", r.code, e.Result)
	}
	present(t, target, "")
	// read-only on this kernel's ABI is full, so --require-full lets it run.
	if testutil.LandlockABI() >= 5 {
		e, r = tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "landlock", "--require-full", "--", "cat", "notes.txt")
		if r.code != 0 || e.Result.Enforcement != "full" || *e.Stdout != "workspace notes" {
			t.Fatalf("read-only --require-full: %d %+v %+v", r.code, e.Result, e.Error)
		}
	}
}

// TestDevShmWriteDenied: a write beneath host /dev never lands. Landlock denies it;
// bwrap's --dev gives the command a private /dev (with its own /dev/shm tmpfs), so the
// write succeeds there and the host's /dev/shm stays untouched.
func TestDevShmWriteDenied(t *testing.T) {
	for _, rung := range []string{"bwrap", "landlock"} {
		t.Run(rung, func(t *testing.T) {
			requireRung(t, rung, 1)
			s := newScratch(t)
			name := fmt.Sprintf("/dev/shm/toh-e2e-%d-%s", os.Getpid(), rung)
			for _, mode := range []string{"read-only", "workspace-write"} {
				e, _ := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", rung, "--mode", mode, "-c", "echo x > "+name+" && cat "+name)
				absent(t, name)
				switch rung {
				case "landlock":
					if !e.Result.Denied {
						t.Fatalf("%s: write beneath /dev not denied: %+v", mode, e.Result)
					}
				case "bwrap":
					if *e.Stdout != "x\n" {
						t.Fatalf("%s: the private /dev/shm is not writable: %+v %q", mode, e.Result, *e.Stderr)
					}
				}
			}
		})
	}
}

func TestLandlockPartialNoticeIsOrdinary(t *testing.T) {
	testutil.RequireLandlockABI(t, 1)
	s := newScratch(t)
	// Workspace-write under Landlock is partial for reasons other than the ABI on this
	// kernel; the exact notice only appears below ABI 5. Either way a child's own exit
	// codes, 125 included, stay ordinary.
	for _, code := range []int{0, 1, 2, 125} {
		e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "landlock", "--mode", "workspace-write", "-c", fmt.Sprintf("exit %d", code))
		if r.code != code || e.Result == nil || e.Result.Denied || *e.Result.RunnerFailed {
			t.Fatalf("exit %d: %d %+v %+v", code, r.code, e.Result, e.Error)
		}
	}
}

func TestNetworkDenyPerRung(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	// Reachable from outside (positive control for the server itself).
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("the test server is not reachable from outside: %v", err)
	}
	c.Close()
	script := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && head -1 <&3", port)
	for _, rung := range []string{"bwrap", "landlock"} {
		t.Run(rung, func(t *testing.T) {
			requireRung(t, rung, 4)
			s := newScratch(t)
			allow, deny := filepath.Join(s.beside, "allow.json"), filepath.Join(s.beside, "deny.json")
			os.WriteFile(allow, []byte(`{"version": 1, "network": "allow"}`), 0o644)
			os.WriteFile(deny, []byte(`{"version": 1, "network": "deny"}`), 0o644)
			for _, mode := range []string{"read-only", "workspace-write"} {
				e, r := tohJSON(t, s.ws, nil, "--policy", allow, "--runner", rung, "--mode", mode, "-c", script)
				if r.code != 0 || *e.Stdout != "hello\n" {
					t.Fatalf("%s network allow: %d %q %q", mode, r.code, *e.Stdout, *e.Stderr)
				}
				var m map[string]any
				e, r = tohJSON(t, s.ws, nil, "--policy", deny, "--runner", rung, "--mode", mode, "-c", script)
				if r.code == 0 || strings.Contains(*e.Stdout, "hello") {
					t.Fatalf("%s network deny: the server was reached: %d %q", mode, r.code, *e.Stdout)
				}
				_ = m
				if !bytes.Contains([]byte(r.stdout), []byte(`"network":"deny"`)) {
					t.Fatalf("%s: the result does not say network deny was applied: %s", mode, r.stdout)
				}
			}
		})
	}
}

// TestBwrapKeepsExistingProtectedPathsReadOnly: the default protect list (.git/hooks,
// .git/config) stays read-only in workspace-write, cannot be swapped out by renaming
// .git, the rest of .git stays writable, and a workspace without them gets no
// artifacts.
func TestBwrapKeepsExistingProtectedPathsReadOnly(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	testutil.MakeTree(t, s.ws, "dir .git", "dir .git/hooks", "file .git/config [core]\n", "file .git/description d\n")
	script := `echo evil > .git/hooks/pre-commit; echo evil >> .git/config; mv .git .git2; mv .git/hooks .git/h2;` +
		`echo ok > .git/description; echo ok > .git/objects-like; exit 0`
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", script)
	if r.code != 0 {
		t.Fatalf("run: %d %q", r.code, r.stderr)
	}
	absent(t, filepath.Join(s.ws, ".git/hooks/pre-commit"))
	present(t, filepath.Join(s.ws, ".git/config"), "[core]\n")
	absent(t, filepath.Join(s.ws, ".git2"))
	absent(t, filepath.Join(s.ws, ".git/h2"))
	present(t, filepath.Join(s.ws, ".git/description"), "ok\n")
	present(t, filepath.Join(s.ws, ".git/objects-like"), "ok\n")

	// No artifacts: a workspace without .git keeps having none.
	bare := effectDir(t, s.beside, "bare")
	r = toh(t, bare, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "echo x > made")
	if r.code != 0 {
		t.Fatalf("run: %d %q", r.code, r.stderr)
	}
	absent(t, filepath.Join(bare, ".git"))
	present(t, filepath.Join(bare, "made"), "x\n")
}

// TestConfinedCommandsHoldNoCapabilities: run by root, a confined command must not
// keep root's capabilities; with CAP_SYS_ADMIN it could remount the read-only root
// read-write, with CAP_MKNOD make a raw disk node in the workspace. Negative control:
// the same probe unconfined does see root's capabilities.
func TestConfinedCommandsHoldNoCapabilities(t *testing.T) {
	testutil.RequireRoot(t)
	s := newScratch(t)
	escaped := filepath.Join(s.beside, "escaped")
	script := `grep '^CapEff' /proc/self/status; grep '^CapBnd' /proc/self/status; ` +
		`mount -o remount,bind,rw / 2>/dev/null; echo pwned > ` + escaped + ` 2>/dev/null; mknod disk b 8 0 2>/dev/null; exit 0`
	for _, rung := range []string{"bwrap", "landlock"} {
		requireRung(t, rung, 1)
		r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", rung, "--mode", "workspace-write", "-c", script)
		if r.code != 0 || !strings.Contains(r.stdout, "CapEff:\t0000000000000000") {
			t.Fatalf("%s: capabilities left in the sandbox: %d %q %q", rung, r.code, r.stdout, r.stderr)
		}
		if rung == "landlock" && !strings.Contains(r.stdout, "CapBnd:\t0000000000000000") {
			t.Fatalf("landlock: bounding set not emptied (uid 0 regains it at execve): %q", r.stdout)
		}
		absent(t, escaped)
		absent(t, filepath.Join(s.ws, "disk"))
	}
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--mode", "danger-full-access", "-c", "grep '^CapEff' /proc/self/status")
	if strings.Contains(r.stdout, "CapEff:\t0000000000000000") {
		t.Fatalf("negative control: root has no capabilities even unconfined (%q); the test proves nothing", r.stdout)
	}
}

// A command that leaves processes in the background does not hold the run, and they
// do not outlive it: under bwrap they die with the run's PID namespace, under Landlock
// toh-exec ends them (sandbox.Stdio.EndLeftovers), however they detached (a plain
// "&", a new session, a double fork, SIGTERM and SIGHUP ignored) and whatever they
// hold (the command's stderr, and its stdout under --json). Negative control: under
// danger-full-access the same processes live on, so the test can see them.
func TestBackgroundProcessDoesNotHoldTheRun(t *testing.T) {
	for _, rung := range []string{"bwrap", "landlock", "landlock fenced", "danger-full-access"} {
		for _, json := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s json=%v", rung, json), func(t *testing.T) {
				var args []string
				switch rung {
				case "danger-full-access":
					args = []string{"--mode", rung}
				case "landlock fenced":
					requireRung(t, "landlock", 1)
					testutil.RequireFUSE(t)
					args = []string{"--runner", "landlock", "--mode", "workspace-write", "--fence"}
				default:
					requireRung(t, rung, 1)
					args = []string{"--runner", rung}
				}
				s := newScratch(t)
				tag := fmt.Sprintf("3600.%d%d", os.Getpid(), time.Now().UnixNano()%1e6)
				// Plain runs hand the command toh-exec's own stdout, which this test
				// reads to its end: the processes leave it alone. Under --json,
				// toh-exec captures stdout through a pipe of its own, which they hold.
				out := ">/dev/null"
				if json {
					args = append(args, "--json")
					out = ""
				}
				if rung == "danger-full-access" {
					// Unconfined, the command gets the test's own stderr pipe.
					out += " 2>/dev/null"
				}
				script := fmt.Sprintf("trap '' TERM HUP; sleep %[1]s </dev/null %[2]s & "+
					"setsid sh -c 'sleep %[1]s & sleep %[1]s' </dev/null %[2]s & "+
					"(sh -c 'sleep %[1]s </dev/null %[2]s &') ; echo started", tag, out)
				args = append(append([]string{"--policy", s.noPolicy}, args...), "-c", script)
				r := runWithin(t, time.Minute, s.ws, nil, args...)
				if r.code != 0 || !strings.Contains(r.stdout, "started") {
					t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
				}
				var pids []int
				if rung == "danger-full-access" {
					waitFor(t, "the background processes to start", func() bool {
						pids = processesWithArg(t, tag)
						return len(pids) == 4
					})
				} else {
					pids = processesWithArg(t, tag)
				}
				for _, pid := range pids {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				if want := map[string]int{"danger-full-access": 4}[rung]; len(pids) != want {
					t.Fatalf("background processes left: %v, want %d", pids, want)
				}
			})
		}
	}
}

// TestLeftoverCannotReadTheTerminal: a process a confined command leaves behind,
// holding the user's terminal, cannot read what the user types after toh-exec
// returned (a password, say), in either rung. Negative control: under
// danger-full-access the same process does read it, so the test can see a theft.
func TestLeftoverCannotReadTheTerminal(t *testing.T) {
	for _, rung := range []string{"bwrap", "landlock", "danger-full-access"} {
		t.Run(rung, func(t *testing.T) {
			args := []string{"--runner", rung, "--mode", "workspace-write"}
			if rung == "danger-full-access" {
				args = []string{"--mode", rung}
			} else {
				requireRung(t, rung, 1)
			}
			s := newScratch(t)
			stolen := filepath.Join(s.ws, "stolen")
			master, slave := openPTY(t)
			defer master.Close()
			defer slave.Close()
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := master.Read(buf); err != nil {
						return
					}
				}
			}()
			// The thief keeps the terminal as fd 3 (sh gives "&" lists /dev/null as
			// stdin) and leaves its session; "ready" says it holds it.
			script := "exec 3<&0; setsid sh -c 'echo ready > ready; exec cat > stolen' <&3 & " +
				"while ! [ -e ready ]; do sleep 0.01; done"
			cmd := exec.Command(tohExec, append(append([]string{"--policy", s.noPolicy}, args...), "-c", script)...)
			cmd.Dir = s.ws
			cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			if err := cmd.Run(); err != nil {
				t.Fatalf("toh-exec: %v", err)
			}
			master.Write([]byte("SECRET\n"))
			theft := func() bool {
				b, _ := os.ReadFile(stolen)
				return strings.Contains(string(b), "SECRET")
			}
			if rung == "danger-full-access" {
				waitFor(t, "the unconfined leftover to read the line", theft)
				return
			}
			// What the terminal still queues is what nobody read.
			time.Sleep(200 * time.Millisecond)
			if theft() {
				t.Fatalf("%s: a leftover process read what was typed after the run", rung)
			}
			if got := injected(t, slave); !strings.Contains(got, "SECRET") {
				t.Fatalf("%s: the typed line is not waiting in the terminal (%q)", rung, got)
			}
		})
	}
}

// processesWithArg returns the PIDs of processes with arg among their arguments.
func processesWithArg(t *testing.T, arg string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(b), "\x00"), arg) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestLandlockCommandCannotSetItsStartersLimits: Landlock governs no prlimit(2),
// and the command runs as toh-exec's user, so it could set toh-exec's limits (an
// address-space limit kills it before it reports; a file limit of 1 stops it
// ending the command's leftovers), or with --fence the fence host's, its parent (a
// CPU limit kills it, and the run read as "the command did not run": found by
// review). In every mode the Landlock rung's seccomp filter refuses setting another
// process's limits, while the command's own limits still change. Positive
// control: under danger-full-access the same call lands on toh-exec.
func TestLandlockCommandCannotSetItsStartersLimits(t *testing.T) {
	testutil.RequireLandlockABI(t, 1)
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Fatal("prlimit (util-linux) is needed")
	}
	s := newScratch(t)
	allow, deny := filepath.Join(s.beside, "allow.json"), filepath.Join(s.beside, "deny.json")
	os.WriteFile(allow, []byte(`{"version": 1, "network": "allow"}`), 0o644)
	os.WriteFile(deny, []byte(`{"version": 1, "network": "deny"}`), 0o644)
	script := `prlimit --pid $PPID --nofile=77:77 2>/dev/null; echo "others: $?"; ` +
		`grep -q '^Max open files  *77  *77 ' /proc/$PPID/limits && echo "starter: 77"; ` +
		`ulimit -n 55 && echo "own: $(ulimit -n)"`
	for _, c := range []struct {
		mode, policy string
		fence        bool
		refused      bool
	}{
		{"read-only", allow, false, true},
		{"workspace-write", deny, false, true},
		{"workspace-write", allow, false, true},
		{"workspace-write", allow, true, true},
		{"danger-full-access", allow, false, false},
	} {
		t.Run(fmt.Sprintf("%s/%s/fence=%v", c.mode, filepath.Base(c.policy), c.fence), func(t *testing.T) {
			args := []string{"--policy", c.policy, "--runner", "landlock", "--mode", c.mode}
			if c.fence {
				testutil.RequireFUSE(t)
				args = append(args, "--fence")
			}
			e, r := tohJSON(t, s.ws, nil, append(args, "-c", script)...)
			want := "others: 1\nown: 55\n"
			if !c.refused {
				want = "others: 0\nstarter: 77\nown: 55\n"
			}
			if r.code != 0 || e.Stdout == nil || *e.Stdout != want {
				t.Errorf("exit %d, stdout %v, want %q (stderr %q)", r.code, e.Stdout, want, r.stderr)
			}
		})
	}
}

// Root without capabilities may still write most sysctls: procfs checks the file's
// mode against the uid. bwrap keeps /proc/sys read-only for root too
// (sandbox.BwrapArgv), so a read-only command cannot set kernel.core_pattern and
// have the kernel run its program as root outside the sandbox. The test writes one
// harmless sysctl's current value back, so that nothing changes either way.
func TestBwrapRootCannotWriteSysctls(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireBwrap(t)
	const sysctl = "/proc/sys/kernel/printk_ratelimit_burst"
	if _, err := os.Stat(sysctl); err != nil {
		t.Fatalf("this kernel has no %s: %v", sysctl, err)
	}
	s := newScratch(t)
	script := `v=$(cat ` + sysctl + `) && echo "$v" > ` + sysctl + ` && echo written`
	for _, mode := range []string{"read-only", "workspace-write"} {
		r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", mode, "-c", script)
		if r.code == 0 || strings.Contains(r.stdout, "written") || !strings.Contains(strings.ToLower(r.stderr), "read-only file system") {
			t.Errorf("%s: a confined root command wrote %s: exit %d, stdout %q, stderr %q", mode, sysctl, r.code, r.stdout, r.stderr)
		}
	}
	// Positive control: the same write, unconfined, is allowed to root.
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--mode", "danger-full-access", "-c", script)
	if r.code != 0 || r.stdout != "written\n" {
		t.Fatalf("control: root could not write %s unconfined (%d %q %q); the test proves nothing", sysctl, r.code, r.stdout, r.stderr)
	}
}

// A bwrap run has its own IPC namespace (sandbox.BwrapArgv): the host's System V
// shared memory, semaphores and message queues are out of a confined command's
// sight and reach. The Landlock rung shares the host's (sandbox package doc).
func TestBwrapRunHasItsOwnIPC(t *testing.T) {
	testutil.RequireBwrap(t)
	const key = 0x746f6801
	id, err := unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
	if err != nil {
		t.Fatalf("creating a System V shared memory segment: %v", err)
	}
	t.Cleanup(func() { unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
	s := newScratch(t)
	script := `if grep -q '^ *` + strconv.Itoa(key) + ` ' /proc/sysvipc/shm; then echo seen; else echo unseen; fi`
	for _, mode := range []string{"read-only", "workspace-write"} {
		r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", mode, "-c", script)
		if r.code != 0 || r.stdout != "unseen\n" {
			t.Errorf("%s: the host's shared memory segment is visible in the sandbox: exit %d, stdout %q, stderr %q", mode, r.code, r.stdout, r.stderr)
		}
	}
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--mode", "danger-full-access", "-c", script)
	if r.code != 0 || r.stdout != "seen\n" {
		t.Fatalf("control: the segment is not listed unconfined (%d %q %q); the test proves nothing", r.code, r.stdout, r.stderr)
	}
}

func init() { subprocessRoles["vsock-socket"] = vsockSocket }

// vsockSocket is the test binary re-executed as a confined command: it makes an
// AF_VSOCK socket and says whether it could.
func vsockSocket() int {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	if err != nil {
		fmt.Printf("vsock: %v\n", err)
		return 0
	}
	unix.Close(fd)
	fmt.Println("vsock: made")
	return 0
}

// AF_VSOCK sockets belong to no network namespace, so on a virtual machine with a
// vsock transport --unshare-net alone leaves the hypervisor's side reachable; the
// bwrap rung's network deny refuses them with a seccomp filter too
// (sandbox.startFiltered). Controls: with the network allowed the same command
// makes one, so the host has a transport and the refusal is the filter's.
func TestBwrapNetworkDenyRefusesVsock(t *testing.T) {
	testutil.RequireBwrap(t)
	if fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0); err != nil {
		t.Skipf("no vsock transport here (%v): nothing to refuse", err)
	} else {
		unix.Close(fd)
	}
	s := newScratch(t)
	// A copy outside /tmp, which workspace-write replaces with a tmpfs.
	self := filepath.Join(s.beside, "vsock-helper")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	testutil.CopyExecutable(t, exe, self)
	allow, deny := filepath.Join(s.beside, "allow.json"), filepath.Join(s.beside, "deny.json")
	os.WriteFile(allow, []byte(`{"version": 1, "network": "allow"}`), 0o644)
	os.WriteFile(deny, []byte(`{"version": 1, "network": "deny"}`), 0o644)
	env := []string{"TOH_TEST_SUBPROCESS=vsock-socket"}
	for _, c := range []struct {
		policy, mode, want string
	}{
		{deny, "read-only", "vsock: permission denied\n"},
		{deny, "workspace-write", "vsock: permission denied\n"},
		{allow, "read-only", "vsock: made\n"},
	} {
		r := toh(t, s.ws, env, "--policy", c.policy, "--runner", "bwrap", "--mode", c.mode, "--", self)
		if r.code != 0 || r.stdout != c.want {
			t.Errorf("%s, %s: exit %d, stdout %q, want %q (stderr %q)", filepath.Base(c.policy), c.mode, r.code, r.stdout, c.want, r.stderr)
		}
	}
}

// TestInheritedChildrenAreNotTheRuns: a process toh-exec inherited as its child
// across the execve that made it toh-exec (a wrapper's "helper & exec toh-exec") is
// not one the run left behind and lives on. Control: in the same call, the command's
// own background process is ended.
func TestInheritedChildrenAreNotTheRuns(t *testing.T) {
	requireRung(t, "landlock", 1)
	s := newScratch(t)
	tag := fmt.Sprintf("3601.%d%d", os.Getpid(), time.Now().UnixNano()%1e6)
	own := fmt.Sprintf("3602.%d%d", os.Getpid(), time.Now().UnixNano()%1e6)
	cmd := exec.Command("sh", "-c", `sleep "$1" </dev/null >/dev/null 2>&1 & shift; exec "$@"`, "sh", tag,
		tohExec, "--policy", s.noPolicy, "--runner", "landlock", "-c", "sleep "+own+" </dev/null >/dev/null 2>&1 &")
	cmd.Dir = s.ws
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	inherited, left := processesWithArg(t, tag), processesWithArg(t, own)
	for _, pid := range append(inherited, left...) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(inherited) != 1 {
		t.Errorf("the inherited child: %v alive, want 1", inherited)
	}
	if len(left) != 0 {
		t.Errorf("control: the run's own leftover is alive: %v", left)
	}
}

// A confined command that prints a runner's failure line and exits as the runner
// would ("bwrap: ...", "landlock-run: ..." and 125, or 1) is reported as the command's
// own result, on every path that execs a runner: bwrap (plain, with the network
// filter, behind the fence stage) and the Landlock launcher behind the fence stage
// (sandbox/status.go). The plain Landlock rung starts the command itself. Positive
// control on each path: the runner's own line is still read when the command never
// started. A command whose #! interpreter does not exist makes bwrap's or the
// launcher's execve fail after the sandbox was set up: that is CANNOT_START (124),
// naming the runner's line, and never SANDBOX_UNAVAILABLE, whose text advises
// switching to danger-full-access (sandbox.CommandExecError); the probe cache is
// kept. A runner that really fails at run time stays SANDBOX_UNAVAILABLE
// (TestHostileHostDefeatsStaleVerdict).
func TestCommandCannotFakeRunnerFailure(t *testing.T) {
	for _, path := range []string{"bwrap", "bwrap network-deny", "bwrap fenced", "landlock", "landlock fenced"} {
		t.Run(path, func(t *testing.T) {
			rung, variant, _ := strings.Cut(path, " ")
			requireRung(t, rung, 4)
			s := newScratch(t)
			pol := s.noPolicy
			args := []string{"--runner", rung, "--mode", "workspace-write"}
			switch variant {
			case "network-deny":
				pol = filepath.Join(s.beside, "deny.json")
				os.WriteFile(pol, []byte(`{"version": 1, "network": "deny"}`), 0o644)
			case "fenced":
				testutil.RequireFUSE(t)
				args = append(args, "--fence")
			}
			args = append([]string{"--policy", pol}, args...)
			for _, code := range []int{1, 125} {
				e, r := tohJSON(t, s.ws, nil, append(args, "-c",
					fmt.Sprintf("echo 'bwrap: Creating new namespace failed' >&2; echo 'landlock-run: made up' >&2; exit %d", code))...)
				if r.code != code || e.Error != nil || e.Result == nil || *e.Result.RunnerFailed || *e.Result.ExitCode != code {
					t.Fatalf("imitation exiting %d: status %d facts %+v error %+v", code, r.code, e.Result, e.Error)
				}
			}
			bad := filepath.Join(s.ws, "bad-interpreter")
			if err := os.WriteFile(bad, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			e, r := tohJSON(t, s.ws, nil, append(args, "--", bad)...)
			line := map[string]string{"bwrap": "bwrap: execvp " + bad + ": No such file or directory",
				"landlock": fmt.Sprintf("landlock-run: executing %q: no such file or directory", bad)}[rung]
			if r.code != exitCannotStart || e.Error == nil || e.Error.Code != "CANNOT_START" || e.Result != nil ||
				!strings.Contains(e.Error.Message, "could not be executed inside the sandbox ("+line+")") {
				t.Fatalf("the command's execve failed: status %d facts %+v error %+v, want CANNOT_START naming %q", r.code, e.Result, e.Error, line)
			}
			if strings.Contains(*e.Stderr, "danger-full-access") {
				t.Errorf("a command that cannot be executed is answered with advice to run unconfined:\n%s", *e.Stderr)
			}
			if variant != "" {
				return
			}
			// Through the runner chain the verdict stays cached: the rung works.
			cache := filepath.Join(s.beside, "probe-cache.json")
			chain := []string{"--policy", pol, "--mode", "workspace-write", "--probe-cache", cache}
			if rung == "landlock" {
				broken := filepath.Join(s.beside, "bwrap-broken")
				os.WriteFile(broken, []byte("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"), 0o755)
				chain = append(chain, "--bwrap", broken)
			}
			if e, r := tohJSON(t, s.ws, nil, append(chain, "--", "true")...); r.code != 0 || e.Result == nil || e.Result.Backend != rung {
				t.Fatalf("true through the chain: status %d facts %+v\n%s", r.code, e.Result, r.stderr)
			}
			before, err := os.ReadFile(cache)
			if err != nil {
				t.Fatalf("no probe verdict cached: %v", err)
			}
			if _, r := tohJSON(t, s.ws, nil, append(chain, "--", bad)...); r.code != exitCannotStart {
				t.Fatalf("the command's execve failed through the chain: status %d, want %d\n%s", r.code, exitCannotStart, r.stderr)
			}
			if after, err := os.ReadFile(cache); err != nil || !bytes.Equal(after, before) {
				t.Errorf("the probe verdict was dropped or changed (%v): %s", err, after)
			}
		})
	}
}

func init() { subprocessRoles["unix-dial"] = unixDial }

// unixDial is the test binary re-executed as a confined command: it connects to the
// unix socket named by $TOH_TEST_DIAL and says whether it could.
func unixDial() int {
	c, err := net.Dial("unix", os.Getenv("TOH_TEST_DIAL"))
	if err != nil {
		fmt.Println("refused")
		return 0
	}
	c.Close()
	fmt.Println("connected")
	return 0
}

// A deputy in the caller's runtime directory (the session bus, through which
// "systemd-run --user" runs anything unconfined) cannot be reached from a bwrap run
// in either mode: the directory is an empty tmpfs there (sandbox/deputies.go).
// Negative control: under danger-full-access the same command connects. Positive
// control: a socket in the workspace connects from the same bwrap runs.
func TestBwrapHidesTheRuntimeDirectory(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	rt := filepath.Join(s.beside, "runtime")
	if err := os.Mkdir(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	bus, own := filepath.Join(rt, "bus"), filepath.Join(s.ws, "own.sock")
	for _, p := range []string{bus, own} {
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	self := filepath.Join(s.beside, "dial-helper")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	testutil.CopyExecutable(t, exe, self)
	for _, c := range []struct{ mode, target, want string }{
		{"read-only", bus, "refused\n"},
		{"workspace-write", bus, "refused\n"},
		{"danger-full-access", bus, "connected\n"},
		{"read-only", own, "connected\n"},
		{"workspace-write", own, "connected\n"},
	} {
		args := []string{"--policy", s.noPolicy, "--mode", c.mode}
		if c.mode != "danger-full-access" {
			args = append(args, "--runner", "bwrap")
		}
		env := []string{"TOH_TEST_SUBPROCESS=unix-dial", "TOH_TEST_DIAL=" + c.target, "XDG_RUNTIME_DIR=" + rt}
		r := toh(t, s.ws, env, append(args, "--", self)...)
		if r.code != 0 || r.stdout != c.want {
			t.Errorf("%s, %s: exit %d, stdout %q, want %q (stderr %q)", c.mode, filepath.Base(c.target), r.code, r.stdout, c.want, r.stderr)
		}
	}
}

// bwrap starts the command in the working directory or not at all: without --chdir it
// quietly falls back to $HOME when the directory is not there inside. A runtime
// directory that holds the working directory is not hidden (sandbox/deputies.go), so
// such a run starts where it was asked to. A working directory under /tmp while the
// workspace lies elsewhere is behind workspace-write's private /tmp: that run cannot
// start (124, naming the cause), where it ran in $HOME before.
func TestBwrapStartsWhereAsked(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	rt := filepath.Join(s.beside, "runtime")
	proj := filepath.Join(rt, "proj")
	if err := os.MkdirAll(proj, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"read-only", "workspace-write"} {
		r := toh(t, proj, []string{"XDG_RUNTIME_DIR=" + rt}, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", mode, "-c", "pwd")
		if r.code != 0 || r.stdout != proj+"\n" {
			t.Errorf("%s, working in the runtime directory: exit %d, stdout %q, want %q (stderr %q)", mode, r.code, r.stdout, proj+"\n", r.stderr)
		}
	}
	pol := filepath.Join(s.beside, "elsewhere.json")
	os.WriteFile(pol, []byte(`{"version": 1, "workspaceRoot": "`+s.ws+`"}`), 0o644)
	inTmp := t.TempDir()
	e, r := tohJSON(t, inTmp, nil, "--policy", pol, "--runner", "bwrap", "--mode", "workspace-write", "-c", "pwd")
	if r.code != exitCannotStart || e.Error == nil || e.Error.Code != "CANNOT_START" || !strings.Contains(e.Error.Message, "private /tmp") {
		t.Fatalf("working under the private /tmp: exit %d facts %+v error %+v, want CANNOT_START naming the private /tmp", r.code, e.Result, e.Error)
	}
	// Spelled through a link, the directory is judged where it really is: a link to
	// /dev/shm would otherwise start the command in the private, empty /dev/shm.
	shm := filepath.Join(s.beside, "shm")
	if err := os.Symlink("/dev/shm", shm); err != nil {
		t.Fatal(err)
	}
	if r := toh(t, shm, []string{"PWD=" + shm}, "--policy", pol, "--runner", "bwrap", "-c", "pwd"); r.code != exitCannotStart || !strings.Contains(r.stderr, "private /dev") {
		t.Fatalf("working in /dev/shm through a link: exit %d stdout %q (%q), want CANNOT_START naming the private /dev", r.code, r.stdout, r.stderr)
	}
	// Control: the same directory in read-only mode, where /tmp is the host's.
	if r := toh(t, inTmp, nil, "--policy", pol, "--runner", "bwrap", "--mode", "read-only", "-c", "pwd"); r.code != 0 || r.stdout != inTmp+"\n" {
		t.Fatalf("read-only under /tmp: exit %d stdout %q (%q)", r.code, r.stdout, r.stderr)
	}
	// A process's directory in /proc (toh-exec's own, through /proc/self) is not in
	// the command's /proc: bwrap failed to enter it, reported as "sandbox
	// unavailable" (123), advice to run unconfined included.
	e, r = tohJSON(t, "/proc/self/task", nil, "--policy", pol, "--runner", "bwrap", "-c", "pwd")
	if r.code != exitCannotStart || e.Error == nil || e.Error.Code != "CANNOT_START" || !strings.Contains(e.Error.Message, "PID namespace") {
		t.Fatalf("working in /proc/PID/task: exit %d facts %+v error %+v, want CANNOT_START naming the PID namespace", r.code, e.Result, e.Error)
	}
	// Controls: /proc's other directories are there, and Landlock starts the command
	// in toh-exec's own.
	if r := toh(t, "/proc/sys/kernel", nil, "--policy", pol, "--runner", "bwrap", "-c", "pwd"); r.code != 0 || r.stdout != "/proc/sys/kernel\n" {
		t.Fatalf("working in /proc/sys/kernel: exit %d stdout %q (%q)", r.code, r.stdout, r.stderr)
	}
	if testutil.LandlockABI() >= 1 {
		if r := toh(t, "/proc/self/task", nil, "--policy", pol, "--runner", "landlock", "-c", "pwd"); r.code != 0 || !strings.HasPrefix(r.stdout, "/proc/") {
			t.Fatalf("Landlock, working in /proc/PID/task: exit %d stdout %q (%q)", r.code, r.stdout, r.stderr)
		}
	}
}

// TestRunnerOrphansAreEnded: what the runner leaves behind when it dies is ended
// with the run. bwrap 0.8 killed during its set-up (a forwarded ^C) leaves its pid 1
// waiting forever, holding a copy of every mount; reparented to toh-exec, it is
// killed. A stand-in runner that leaves a process behind and exits shows it
// deterministically (the real window is a few milliseconds wide); without the
// subreaper the process lives on (the negative control, checked by reverting).
func TestRunnerOrphansAreEnded(t *testing.T) {
	s := newScratch(t)
	tag := fmt.Sprintf("3700.%d%d", os.Getpid(), time.Now().UnixNano()%1e6)
	fake := filepath.Join(s.beside, "bwrap")
	if err := os.WriteFile(fake, fmt.Appendf(nil, "#!/bin/sh\nsleep %s </dev/null >/dev/null 2>&1 &\necho 'bwrap: set-up cut short' >&2\nexit 1\n", tag), 0o755); err != nil {
		t.Fatal(err)
	}
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--bwrap", fake,
		"--probe-cache", filepath.Join(s.beside, "cache.json"), "--", "true")
	left := processesWithArg(t, tag)
	for _, pid := range left {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if !strings.Contains(r.stderr, "set-up cut short") {
		t.Fatalf("the stand-in runner did not run: %d %q", r.code, r.stderr)
	}
	if len(left) != 0 {
		t.Fatalf("the runner's orphan outlived the run: %v", left)
	}
}

// TestMissingWritableRootCannotStart: a writable root that does not exist (a session
// whose directory is gone, a root not made yet) is exit 124 naming it, on both
// rungs, and never SANDBOX_UNAVAILABLE with its advice to run unconfined (found by
// review: bwrap's "Can't find source path" read as a runner failure). Control: the
// same policy runs once the directory exists.
func TestMissingWritableRootCannotStart(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	gone := filepath.Join(s.beside, "gone")
	pf := filepath.Join(s.beside, "gone.json")
	if err := os.WriteFile(pf, []byte(fmt.Sprintf(`{"version":1,"mode":"workspace-write","workspaceRoot":%q}`, gone)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, rung := range []string{"bwrap", "landlock"} {
		if rung == "landlock" && testutil.LandlockABI() == 0 {
			continue
		}
		os.Remove(gone)
		r := toh(t, s.ws, nil, "--policy", pf, "--runner", rung, "--", "true")
		if r.code != 124 || !strings.Contains(r.stderr, `writable root "`+gone+`": no such file or directory`) || strings.Contains(r.stderr, "danger-full-access") {
			t.Errorf("%s: exit %d, stderr %q; want 124 naming the missing root", rung, r.code, r.stderr)
		}
		if err := os.Mkdir(gone, 0o755); err != nil {
			t.Fatal(err)
		}
		if r := toh(t, s.ws, nil, "--policy", pf, "--runner", rung, "--", "true"); r.code != 0 {
			t.Errorf("%s: with the root made: exit %d, %q", rung, r.code, r.stderr)
		}
	}
}

// TestTooManyArgumentsForBwrap: a command line past bwrap's own limit is exit 124
// saying so, never SANDBOX_UNAVAILABLE with its advice to run unconfined (found by
// review); the Landlock rung, which has no such limit, runs it. Control: a line
// within the limit runs under bwrap.
func TestTooManyArgumentsForBwrap(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	args := make([]string, 9000)
	for i := range args {
		args[i] = strconv.Itoa(i)
	}
	r := toh(t, s.ws, nil, append([]string{"--policy", s.noPolicy, "--runner", "bwrap", "--", "true"}, args...)...)
	if r.code != 124 || !strings.Contains(r.stderr, "bwrap takes at most 9000 arguments") || strings.Contains(r.stderr, "danger-full-access") {
		t.Errorf("bwrap, 9000 arguments: exit %d, %q", r.code, r.stderr)
	}
	if r := toh(t, s.ws, nil, append([]string{"--policy", s.noPolicy, "--runner", "bwrap", "--", "true"}, args[:100]...)...); r.code != 0 {
		t.Errorf("bwrap, 100 arguments: exit %d, %q", r.code, r.stderr)
	}
	if testutil.LandlockABI() > 0 {
		if r := toh(t, s.ws, nil, append([]string{"--policy", s.noPolicy, "--runner", "landlock", "--", "true"}, args...)...); r.code != 0 {
			t.Errorf("landlock, 9000 arguments: exit %d, %q", r.code, r.stderr)
		}
	}
}
