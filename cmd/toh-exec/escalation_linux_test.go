package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
)

// TestTerminalApprover answers the prompt on a real pseudo-terminal that is the
// controlling terminal of toh-exec.
func TestTerminalApprover(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	for _, tc := range []struct {
		answer string
		code   int
		landed bool
	}{{"y\n", 0, true}, {"n\n", exitEscalation, false}, {"\x04", exitEscalation, false}} {
		target := filepath.Join(s.ws, "tty-out")
		os.Remove(target)
		screen, answer := promptOnPTY(t, s.ws, "", "--policy", s.noPolicy, "--runner", "bwrap", "--sandbox-permissions", "workspace-write",
			"--justification", "Write \x1b[2Jtty-out.", "-c", "echo ok > tty-out")
		if strings.Contains(screen, "\x1b[2J") || !strings.Contains(screen, `\x1b[2Jtty-out.`) {
			t.Fatalf("the justification reached the terminal unescaped: %q", screen)
		}
		if got := answer(tc.answer); got != tc.code {
			t.Fatalf("answer %q: exit %d, want %d", tc.answer, got, tc.code)
		}
		if tc.landed {
			present(t, target, "ok\n")
		} else {
			absent(t, target)
		}
	}
}

// promptOnPTY starts toh-exec with args in dir, with a new pseudo-terminal as its
// controlling terminal and typed already waiting on it, and returns what it showed
// up to its prompt, and answer, which types the answer and returns toh-exec's exit
// code once it ended.
func promptOnPTY(t *testing.T, dir, typed string, args ...string) (screen string, answer func(string) int) {
	t.Helper()
	master, slave := openPTY(t)
	if typed != "" {
		if _, err := master.Write([]byte(typed)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(tohExec, args...)
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	screen = readUntil(t, master, "[y/N] ")
	return screen, func(a string) int {
		master.Write([]byte(a))
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, err := master.Read(buf); err != nil {
					return
				}
			}
		}()
		cmd.Wait()
		master.Close()
		return cmd.ProcessState.ExitCode()
	}
}

func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	var unlock int32
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, m.Fd(), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatal(errno)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, sl
}

func readUntil(t *testing.T, f *os.File, want string) string {
	t.Helper()
	var got []byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1024)
		for !bytes.Contains(got, []byte(want)) {
			n, err := f.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("no prompt on the terminal; got %q", got)
	}
	return string(got)
}

// Input typed before the prompt appeared answers nothing: a "y" waiting on the
// terminal granted the escalation at once (found by review). The prompt discards it
// and waits; the answer typed after it decides.
func TestTerminalApproverIgnoresTypeAhead(t *testing.T) {
	s := newScratch(t)
	ran := filepath.Join(s.beside, "ran")
	screen, answer := promptOnPTY(t, s.ws, "y\n", "--policy", s.noPolicy, "--sandbox-permissions", "danger-full-access",
		"--justification", "Touch a file beside.", "--", "touch", ran)
	for _, want := range []string{"program:       /", "writable:      everything (no sandbox)"} {
		if !strings.Contains(screen, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, screen)
		}
	}
	if got := answer("n\n"); got != exitEscalation {
		t.Fatalf("exit %d, want %d (the typed-ahead y answered)", got, exitEscalation)
	}
	absent(t, ran)
}

// A command padded with spaces cannot push its start off the screen: a run of
// 4,000 spaces left only "make test" in view (found by review). The prompt shows the
// run by count, outside the quotes.
func TestTerminalPromptShowsPaddingByCount(t *testing.T) {
	s := newScratch(t)
	screen, answer := promptOnPTY(t, s.ws, "", "--policy", s.noPolicy, "--sandbox-permissions", "danger-full-access",
		"--justification", "Run the unit tests.", "--", "sh", "-c", "echo curl x | cat;"+strings.Repeat(" ", 4000)+"echo make test")
	if strings.Contains(screen, strings.Repeat(" ", 17)) || !strings.Contains(screen, `"echo curl x | cat;"⟨4000 spaces⟩"echo make test"`) {
		t.Errorf("the prompt shows the padding:\n%.600q", screen)
	}
	if got := answer("n\n"); got != exitEscalation {
		t.Fatalf("exit %d, want %d", got, exitEscalation)
	}
}
