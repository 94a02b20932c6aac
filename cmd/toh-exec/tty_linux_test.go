package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
)

func init() {
	subprocessRoles["tiocsti"] = tiocsti
	subprocessRoles["tty-mess"] = ttyMess
	subprocessRoles["tty-stop"] = ttyStop
	subprocessRoles["job-shell"] = jobShell
	subprocessRoles["thread-reader"] = threadReader
	if os.Getenv("TOH_TEST_SUBPROCESS") == "thread-reader" {
		runtime.LockOSThread() // main runs on the main thread, which threadReader ends
	}
}

// threadReader reads lines from stdin into ./got on a thread other than the main
// one, whose state it then hides from a check of the main thread alone (found by
// review): with argument "exit" the main thread exits by itself (its state reads
// Z). (A main thread held in a ptrace stop hides the same way; a Go program is no
// test for it: its garbage collector waits for that thread.)
func threadReader() int {
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never the main thread, which main keeps
		close(ready)
		buf := make([]byte, 4096)
		for {
			n, err := unix.Read(0, buf)
			if n <= 0 || err != nil {
				unix.Exit(0) // the whole process
			}
			f, _ := os.OpenFile("got", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			f.Write(buf[:n])
			f.Close()
		}
	}()
	<-ready
	// Found by its pid: once its main thread is gone its cmdline reads empty.
	os.WriteFile("reader.pid", []byte(strconv.Itoa(os.Getpid())), 0o644)
	switch os.Args[len(os.Args)-1] {
	case "exit":
		unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0) // this thread only
	}
	select {}
}

// jobShell does what an interactive shell does with a job: it starts the argv of
// $TOH_JOB_ARGV (a JSON array) in a process group of its own as the terminal's
// foreground group (it must itself lead the terminal's session), writes the job's
// pid to $TOH_JOB_PIDFILE, and waits for it; its exit status is the job's.
func jobShell() int {
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv("TOH_JOB_ARGV")), &argv); err != nil || len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "TOH_JOB_ARGV:", err)
		return 3
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err := os.WriteFile(os.Getenv("TOH_JOB_PIDFILE"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	cmd.Wait()
	return cmd.ProcessState.ExitCode()
}

// ttyMess changes what a command can change of the terminal on its stdin: echo and
// canonical mode off, the N_NULL line discipline, exclusive mode.
func ttyMess() int {
	tio, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	tio.Lflag &^= unix.ECHO | unix.ICANON
	errs := []error{unix.IoctlSetTermios(0, unix.TCSETS, tio), unix.IoctlSetPointerInt(0, unix.TIOCSETD, 27),
		unix.IoctlSetInt(0, unix.TIOCEXCL, 0)}
	for _, err := range errs {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	return 0
}

// ttyStop stops the terminal's output (tcflow TCOOFF), then, with
// TOH_TEST_WRITE set, writes a line to stderr.
func ttyStop() int {
	if err := unix.IoctlSetInt(0, unix.TCXONC, unix.TCOOFF); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if os.Getenv("TOH_TEST_WRITE") != "" {
		fmt.Fprintln(os.Stderr, "after-stop")
	}
	return 0
}

// tiocsti pushes a command into the controlling terminal's input queue, as an
// attacker would to have the user's shell run it after the sandbox exits.
func tiocsti() int {
	for _, c := range []byte("echo INJECTED\n") {
		b := c
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&b))); errno != 0 {
			fmt.Fprintf(os.Stderr, "TIOCSTI: %v\n", errno)
			return 3
		}
	}
	return 0
}

// injected reports whether anything was pushed into the terminal's input queue: the
// test holds the slave end, so queued input is readable there.
func injected(t *testing.T, slave *os.File) string {
	t.Helper()
	fd := int(slave.Fd())
	unix.SetNonblock(fd, true)
	buf := make([]byte, 256)
	n, _ := unix.Read(fd, buf)
	if n < 0 {
		n = 0
	}
	return string(buf[:n])
}

// TestConfinedCommandCannotInjectTerminalInput: a confined command attached to the
// user's terminal cannot push input into it with TIOCSTI (it runs in a session of its
// own, without a controlling terminal). Negative control: the same helper run
// unconfined on the same terminal does inject, where the kernel still allows TIOCSTI.
func TestConfinedCommandCannotInjectTerminalInput(t *testing.T) {
	testutil.RequireBwrap(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := newScratch(t)
	legacy, _ := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti")
	run := func(args ...string) (int, string, string) {
		master, slave := openPTY(t)
		defer master.Close()
		defer slave.Close()
		// Raw-ish terminal: no echo, so only injected input is queued.
		tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		tio.Lflag &^= unix.ECHO
		unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, tio)
		cmd := exec.Command(tohExec, append(append([]string{"--policy", s.noPolicy}, args...), "--", self)...)
		cmd.Dir = s.ws
		cmd.Env = append(os.Environ(), "TOH_TEST_SUBPROCESS=tiocsti")
		cmd.Stdin, cmd.Stdout = slave, slave
		var stderr strings.Builder
		cmd.Stderr = &stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		go drain(master)
		cmd.Run()
		return cmd.ProcessState.ExitCode(), injected(t, slave), stderr.String()
	}
	for _, rung := range []string{"bwrap", "landlock"} {
		if rung == "landlock" && testutil.LandlockABI() == 0 {
			continue
		}
		code, in, stderr := run("--runner", rung)
		if strings.Contains(in, "INJECTED") {
			t.Fatalf("%s: the confined command injected %q into the terminal", rung, in)
		}
		if code == 0 || !strings.Contains(stderr, "TIOCSTI") {
			t.Fatalf("%s: the injection attempt did not fail: exit %d stderr %q", rung, code, stderr)
		}
	}
	if strings.TrimSpace(string(legacy)) == "0" {
		t.Logf("dev.tty.legacy_tiocsti=0: the kernel refuses TIOCSTI anyway; no negative control possible")
		return
	}
	code, in, stderr := run("--mode", "danger-full-access")
	if code != 0 || !strings.Contains(in, "INJECTED") {
		t.Fatalf("negative control: the unconfined helper could not inject (exit %d, queued %q, stderr %q); the test proves nothing", code, in, stderr)
	}
}

// TestInterruptFromTerminalEndsTheSandbox: with the confined command in a session of
// its own, ^C on the terminal still ends it (toh-exec forwards the signal).
func TestInterruptFromTerminalEndsTheSandbox(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	for _, rung := range []string{"bwrap", "landlock"} {
		if rung == "landlock" && testutil.LandlockABI() == 0 {
			continue
		}
		master, slave := openPTY(t)
		tag := fmt.Sprintf("777.%d", time.Now().UnixNano()%1000000)
		cmd := exec.Command(tohExec, "--policy", s.noPolicy, "--runner", rung, "--", "sleep", tag)
		cmd.Dir = s.ws
		startOnTerminal(t, cmd, master, slave)
		var sleeps []int
		waitFor(t, "the sleep to start", func() bool {
			sleeps = descendantsOf(cmd.Process.Pid, "sleep", tag)
			return len(sleeps) == 1
		})
		master.Write([]byte{3}) // ^C
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("%s: ^C did not end toh-exec", rung)
		}
		waitFor(t, "the sandboxed sleep to end", func() bool { return !processExists(sleeps[0], "sleep", tag) })
		if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGINT) {
			t.Logf("%s: exit status after ^C: %d", rung, code)
		}
		master.Close()
	}
}

// TestConfinedCommandCannotOpenOtherTerminals: a confined command cannot open one of
// the user's terminals by path (/dev/pts/N) and so cannot read what is typed into it.
// Under Landlock the read rules cover every entry of "/" but /dev; under bwrap /dev is
// private. Controls: under danger-full-access the same open works, and the Landlock
// run still reads /dev/urandom and files elsewhere.
func TestConfinedCommandCannotOpenOtherTerminals(t *testing.T) {
	s := newScratch(t)
	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	script := fmt.Sprintf("exec 3<%s && echo opened; head -c 4 /dev/urandom | wc -c; head -c 1 /etc/passwd", slave.Name())
	for _, c := range []struct {
		args   []string
		opened bool
	}{
		{[]string{"--runner", "landlock"}, false},
		{[]string{"--runner", "landlock", "--mode", "workspace-write"}, false},
		{[]string{"--runner", "bwrap"}, false},
		{[]string{"--mode", "danger-full-access"}, true},
	} {
		if c.args[0] == "--runner" {
			requireRung(t, c.args[1], 1)
		}
		r := toh(t, s.ws, nil, append(append([]string{"--policy", s.noPolicy}, c.args...), "-c", script)...)
		if got := strings.Contains(r.stdout, "opened"); got != c.opened {
			t.Errorf("%q: opened %s: %v, want %v (stdout %q, stderr %q)", c.args, slave.Name(), got, c.opened, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stdout, "4\nr") {
			t.Errorf("%q: /dev/urandom or /etc/passwd not read: stdout %q, stderr %q", c.args, r.stdout, r.stderr)
		}
	}
}

// terminalRun is one run of the terminal tests: a rung (confined: toh-exec puts the
// terminal back) or the unconfined control (it does not).
type terminalRun struct {
	args     []string
	confined bool
}

// terminalRuns are both rungs and the control; a rung this host lacks skips the test.
func terminalRuns(t *testing.T) []terminalRun {
	t.Helper()
	requireRung(t, "bwrap", 1)
	requireRung(t, "landlock", 1)
	return []terminalRun{
		{[]string{"--runner", "bwrap"}, true},
		{[]string{"--runner", "landlock"}, true},
		{[]string{"--mode", "danger-full-access"}, false},
	}
}

// TestTerminalSettingsDoNotOutlastTheRun: a confined command that changes the
// settings of the terminal it was given (echo and canonical mode off, the N_NULL
// line discipline, exclusive mode) does not leave them so for the user's shell.
// Control: under danger-full-access the changes stay, so the test would see one.
func TestTerminalSettingsDoNotOutlastTheRun(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := newScratch(t)
	// And bwrap started again after a first start that met the host's mounts
	// moving: the terminal is put back after the start that ran the command too.
	flaky, _ := flakyBwrap(t, s.beside, testutil.RequireBwrap(t), bwrapRaceLine, 1)
	runs := append(terminalRuns(t), terminalRun{[]string{"--runner", "bwrap", "--bwrap", flaky}, true})
	for _, c := range runs {
		master, slave := openPTY(t)
		go drain(master)
		before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if before.Lflag&(unix.ECHO|unix.ICANON) != unix.ECHO|unix.ICANON {
			t.Fatalf("premise: a new pty without echo or canonical mode: %#x", before.Lflag)
		}
		ldisc, _ := unix.IoctlGetInt(int(slave.Fd()), unix.TIOCGETD)
		cmd := exec.Command(tohExec, append(append([]string{"--policy", s.noPolicy}, c.args...), "--", self)...)
		cmd.Dir = s.ws
		cmd.Env = append(os.Environ(), "TOH_TEST_SUBPROCESS=tty-mess")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		if err := cmd.Run(); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		ldiscAfter, _ := unix.IoctlGetInt(int(slave.Fd()), unix.TIOCGETD)
		excl, _ := unix.IoctlGetInt(int(slave.Fd()), unix.TIOCGEXCL)
		if ldiscAfter != ldisc {
			// Termios requests go through the line discipline, and N_NULL
			// refuses them: put it back to read what else the command left.
			unix.IoctlSetPointerInt(int(slave.Fd()), unix.TIOCSETD, ldisc)
		}
		after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if kept := *after == *before; kept != c.confined {
			t.Errorf("%q: settings kept %v, want %v (lflag %#x -> %#x)", c.args, kept, c.confined, before.Lflag, after.Lflag)
		}
		if kept := ldiscAfter == ldisc; kept != c.confined {
			t.Errorf("%q: line discipline kept %v, want %v (%d -> %d)", c.args, kept, c.confined, ldisc, ldiscAfter)
		}
		if kept := excl == 0; kept != c.confined {
			t.Errorf("%q: left exclusive %v, want %v", c.args, !kept, !c.confined)
		}
		master.Close()
		slave.Close()
	}
}

// TestStoppedTerminalOutputDoesNotOutlastTheRun: a confined command that stops the
// output of the terminal it was given (tcflow TCOOFF) and then writes to stderr does
// not hang toh-exec (its copy of that stderr to the terminal blocked until the user
// typed ^Q), and the user's terminal writes again after the run. Control: under
// danger-full-access the output stays stopped (the helper then writes nothing, or
// it would block itself), so the probe would see it.
func TestStoppedTerminalOutputDoesNotOutlastTheRun(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := newScratch(t)
	for _, c := range terminalRuns(t) {
		master, slave := openPTY(t)
		seen := make(chan string, 64)
		go func() {
			buf := make([]byte, 4096)
			for {
				n, err := master.Read(buf)
				if err != nil {
					close(seen)
					return
				}
				seen <- string(buf[:n])
			}
		}()
		cmd := exec.Command(tohExec, append(append([]string{"--policy", s.noPolicy}, c.args...), "--", self)...)
		cmd.Dir = s.ws
		cmd.Env = append(os.Environ(), "TOH_TEST_SUBPROCESS=tty-stop")
		if c.confined {
			cmd.Env = append(cmd.Env, "TOH_TEST_WRITE=1")
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%q: %v", c.args, err)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
			unix.IoctlSetInt(int(slave.Fd()), unix.TCXONC, unix.TCOON)
			t.Errorf("%q: toh-exec hung behind the stopped output", c.args)
		}
		// The terminal writes again: a probe written now reaches the other side.
		wrote := make(chan struct{})
		go func() {
			slave.Write([]byte("probe\n"))
			close(wrote)
		}()
		var out strings.Builder
		deadline := time.After(3 * time.Second)
	read:
		for !strings.Contains(out.String(), "probe") {
			select {
			case b, ok := <-seen:
				if !ok {
					break read
				}
				out.WriteString(b)
			case <-deadline:
				break read
			}
		}
		restarted := strings.Contains(out.String(), "probe")
		if restarted != c.confined {
			t.Errorf("%q: output restarted %v, want %v (read %q)", c.args, restarted, c.confined, out.String())
		}
		if c.confined && !strings.Contains(out.String(), "after-stop") {
			t.Errorf("%q: the command's stderr never reached the terminal: %q", c.args, out.String())
		}
		unix.IoctlSetInt(int(slave.Fd()), unix.TCXONC, unix.TCOON)
		<-wrote
		master.Close()
		slave.Close()
	}
}

// TestCtrlZStopsTheCommand: the terminal's ^Z, which reaches toh-exec alone (the
// command runs in a session of its own), stops the command too, so that it cannot
// read what the user types into the shell meanwhile; the SIGCONT of "fg" continues
// it, and it reads what was typed. toh-exec runs as a shell's job (jobShell). Before
// 2026-12-02 toh-exec stopped and the command went on reading the terminal (found
// by review), and the first fix stopped only the command's process group, which a
// reader that made a session of its own left (found by the next review). Negative
// control: with toh-exec stopped, the reading process is stopped ('T') and a line
// typed then is not read; positive: after SIGCONT it is, and the run ends
// normally. And where no shell could continue it (toh-exec leads the terminal's
// session, its group orphaned), ^Z is ignored as by any program, instead of
// stopping toh-exec for good (found by review).
func TestCtrlZStopsTheCommand(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	reader := `while read l; do echo "$l" >> got; done`
	got := func() string { b, _ := os.ReadFile(s.ws + "/got"); return string(b) }
	state := func(pid int) byte {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			return 0
		}
		return b[i+2]
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	// The confined reader: a copy outside /tmp, which bwrap's workspace-write
	// replaces with a tmpfs.
	helper := filepath.Join(s.beside, "ctrlz-helper")
	testutil.CopyExecutable(t, self, helper)
	for _, rung := range []string{"bwrap", "landlock"} {
		if rung == "landlock" && testutil.LandlockABI() == 0 {
			continue
		}
		for _, c := range []struct {
			name, script string
			orphaned     bool
			inScript     bool // toh-exec run by a script the shell runs as the job
		}{
			{"the command", reader, false, false},
			{"the command, toh-exec inside a script", reader, false, true},
			{"a reader in a session of its own", "exec 3<&0; setsid sh -c '" + reader + "' <&3 & wait", false, false},
			{"a reader thread whose main thread exited", "TOH_TEST_SUBPROCESS=thread-reader exec " + helper + " exit", false, false},
			{"no shell to continue it", reader, true, false},
		} {
			t.Run(rung+"/"+c.name, func(t *testing.T) {
				os.Remove(s.ws + "/got")
				os.Remove(s.ws + "/reader.pid")
				master, slave := openPTY(t)
				defer master.Close()
				argv := []string{tohExec, "--policy", s.noPolicy, "--runner", rung, "--mode", "workspace-write", "-c", c.script}
				pidfile := filepath.Join(s.beside, "job.pid")
				os.Remove(pidfile)
				cmd := exec.Command(self)
				if c.inScript {
					argv = append([]string{"/bin/sh", "-c", `"$@"; true`, "sh"}, argv...)
				}
				argvJSON, _ := json.Marshal(argv)
				cmd.Env = append(os.Environ(), "TOH_TEST_SUBPROCESS=job-shell", "TOH_JOB_PIDFILE="+pidfile, "TOH_JOB_ARGV="+string(argvJSON))
				if c.orphaned {
					cmd = exec.Command(argv[0], argv[1:]...)
				}
				cmd.Dir = s.ws
				startOnTerminal(t, cmd, master, slave)
				job := cmd.Process.Pid
				if !c.orphaned {
					waitFor(t, "the job's pid", func() bool {
						b, err := os.ReadFile(pidfile)
						if err == nil {
							job, err = strconv.Atoi(string(b))
						}
						return err == nil
					})
				}
				var readers []int
				waitFor(t, "the reader", func() bool {
					readers = slices.Concat(descendantsOf(job, "bash", "-c", reader), descendantsOf(job, "sh", "-c", reader))
					if b, err := os.ReadFile(filepath.Join(s.ws, "reader.pid")); err == nil {
						if p := hostPidOf(job, atoi(string(b))); p > 0 {
							readers = append(readers, p)
						}
					}
					return len(readers) == 1
				})
				master.Write([]byte("one\n"))
				waitFor(t, "the first line to be read", func() bool { return got() == "one\n" })
				master.Write([]byte{0x1a}) // ^Z
				if c.orphaned {
					master.Write([]byte("two\n"))
					waitFor(t, "the next line to be read", func() bool { return got() == "one\ntwo\n" })
					if st := state(job); st == 'T' {
						t.Errorf("toh-exec stopped with no shell to continue it")
					}
				} else {
					waitFor(t, "toh-exec and every thread of the reader to stop", func() bool {
						if state(job) != 'T' {
							return false
						}
						tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", readers[0]))
						for _, task := range tasks {
							if st := state(atoi(task.Name())); st != 'T' && st != 't' && st != 'Z' {
								return false
							}
						}
						return len(tasks) > 0
					})
					master.Write([]byte("secret\n"))
					time.Sleep(200 * time.Millisecond)
					if g := got(); g != "one\n" {
						t.Errorf("the reader read the terminal while stopped: %q", g)
					}
					syscall.Kill(-job, syscall.SIGCONT) // fg: the whole job
					waitFor(t, "the line typed meanwhile to be read", func() bool { return got() == "one\nsecret\n" })
				}
				master.Write([]byte{4}) // ^D
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					syscall.Kill(job, syscall.SIGKILL)
					cmd.Process.Kill()
					t.Fatal("toh-exec did not end")
				}
				if code := cmd.ProcessState.ExitCode(); code != 0 {
					t.Errorf("exit status %d", code)
				}
			})
		}
	}
}

// hostPidOf is the pid, as this process sees it, of the descendant of root whose pid
// in its own PID namespace is inner (a bwrap run's processes see other numbers).
func hostPidOf(root, inner int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(rest)
				if len(f) == 0 || f[len(f)-1] != strconv.Itoa(inner) {
					break
				}
				for p := pid; p > 1; p = ppid(p) {
					if p == root {
						return pid
					}
				}
			}
		}
	}
	return 0
}

// drain reads r until it fails: a terminal's output nobody checks must not fill up
// and block the writer.
func drain(r *os.File) {
	buf := make([]byte, 4096)
	for {
		if _, err := r.Read(buf); err != nil {
			return
		}
	}
}

// startOnTerminal starts cmd as the leader of a session whose controlling terminal
// is the pty slave (its standard streams too), closes this process's copy of the
// slave and drains the master.
func startOnTerminal(t *testing.T, cmd *exec.Cmd, master, slave *os.File) {
	t.Helper()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	go drain(master)
}
