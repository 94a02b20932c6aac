//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Where things are inside the guest image (see vm-tests/lib/image.sh).
const (
	tohExec     = "/usr/bin/toh-exec"
	tohMount    = "/usr/bin/toh-mount"
	mountStatus = "/etc/toh-vm/toh-mount-status" // "built", "absent" or "build-failed: ..."
	userName    = "toh"
	userID      = 1000
	home        = "/home/toh"
	workspace   = "/home/toh/ws"
	canaryPath  = "/home/toh/canary.txt"
	canaryText  = "canary: never changed by a confined run\n"
	cmdTimeout  = 120 * time.Second // TCG is slow; this only bounds hangs
	// probeTimeout replaces toh-exec's 5 s default: under TCG a probe of a working
	// bwrap can take longer than on hardware, and a timeout would be misread as a
	// failing rung.
	probeTimeout = "30s"
)

// setupUser makes the unprivileged user's world: a home with a workspace and a canary.
func setupUser() error {
	files := map[string]string{
		"/etc/passwd":  "root:x:0:0:root:/root:/bin/sh\ntoh:x:1000:1000:toh:/home/toh:/bin/sh\n",
		"/etc/group":   "root:x:0:\ntoh:x:1000:\n",
		"/etc/shadow":  "root:*:1::::::\ntoh:*:1::::::\n",
		"/etc/hosts":   "127.0.0.1 localhost\n",
		"/etc/profile": "",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			return err
		}
	}
	for _, d := range []string{home, workspace, home + "/.cache"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.Chown(d, userID, userID); err != nil {
			return err
		}
	}
	if err := os.WriteFile(canaryPath, []byte(canaryText), 0o644); err != nil {
		return err
	}
	if err := os.Chown(canaryPath, userID, userID); err != nil {
		return err
	}
	// The loopback interface is all the network there is (qemu runs with -nic none).
	exec.Command("/bin/ip", "link", "set", "lo", "up").Run()
	return nil
}

// result is one finished command.
type result struct {
	code           int // exit status, -1 when it could not be started or timed out
	stdout, stderr string
	err            error
}

// envelope is toh-exec's --json output.
type envelope struct {
	Result *struct {
		Mode          string `json:"mode"`
		Denied        bool   `json:"denied"`
		Enforcement   string `json:"enforcement"`
		Backend       string `json:"backend"`
		RunnerFailed  bool   `json:"runnerFailed"`
		RunnerFailure string `json:"runnerFailure"`
		ExitCode      *int   `json:"exitCode"`
	} `json:"result"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

func (r result) envelope() (envelope, error) {
	var e envelope
	err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &e)
	return e, err
}

// summary is what the table shows for a run: exit status and the result facts.
func (r result) summary() string {
	if r.err != nil && r.code < 0 {
		return "error: " + r.err.Error()
	}
	e, err := r.envelope()
	if err != nil {
		return fmt.Sprintf("exit=%d (no JSON)", r.code)
	}
	parts := []string{fmt.Sprintf("exit=%d", r.code)}
	if e.Error != nil {
		parts = append(parts, "error="+e.Error.Code)
	}
	if e.Result != nil && e.Result.Backend != "" {
		parts = append(parts, "backend="+e.Result.Backend, "enforcement="+e.Result.Enforcement)
	}
	if e.Result != nil && e.Result.Denied {
		parts = append(parts, "denied")
	}
	return strings.Join(parts, " ")
}

// allOutput is stdout and stderr together, with --json's captured streams unpacked.
func (r result) allOutput() string {
	out := r.stdout + r.stderr
	if e, err := r.envelope(); err == nil {
		out += e.Stdout + e.Stderr
		if e.Error != nil {
			out += e.Error.Message
		}
	}
	return out
}

// asUser runs argv as the unprivileged user in the workspace with a minimal
// environment; asRoot runs it as root in /.
func asUser(argv ...string) result {
	return runCmd(true, workspace, argv)
}

func asRoot(argv ...string) result {
	return runCmd(false, "/", argv)
}

func runCmd(unprivileged bool, dir string, argv []string) result {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root", "LANG=C"}
	if unprivileged {
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "USER=" + userName, "LOGNAME=" + userName, "LANG=C"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: userID, Gid: userID, Groups: []uint32{}}}
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: so.String(), stderr: se.String(), err: err}
	if ctx.Err() != nil {
		r.code, r.err = -1, fmt.Errorf("timed out after %v", cmdTimeout)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		r.code = -1
	}
	return r
}

// toh runs toh-exec as the unprivileged user.
func toh(args ...string) result {
	return asUser(append([]string{tohExec}, args...)...)
}

// chain runs toh-exec with the default runner chain, probing afresh.
func chain(args ...string) result {
	return toh(append([]string{"--refresh-probe", "--probe-timeout", probeTimeout}, args...)...)
}

// wsPath is a path in the workspace for check name.
func wsPath(name string) string { return filepath.Join(workspace, name) }

// exists says whether p exists, as seen by root.
func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func presence(p string) string {
	if exists(p) {
		return "present"
	}
	return "absent"
}

// canaryIntact checks that the canary outside the workspace is byte-identical.
func canaryIntact() (string, bool) {
	b, err := os.ReadFile(canaryPath)
	if err != nil {
		return "error: " + err.Error(), false
	}
	if string(b) != canaryText {
		return "changed", false
	}
	return "intact", true
}

// landlockABI asks the kernel for its Landlock ABI; 0 means unavailable.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

func itoa(n int) string { return strconv.Itoa(n) }

// status reads one of the host's notes about what it packed ("built", "absent", ...).
func status(p string) string {
	s := readTrim(p)
	if strings.HasPrefix(s, "error: ") {
		return "absent"
	}
	return s
}

// firstLine returns the first non-empty line of s that contains sub (case-insensitive),
// or the first non-empty line when sub is "".
func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && (sub == "" || strings.Contains(strings.ToLower(l), strings.ToLower(sub))) {
			return l
		}
	}
	return ""
}
