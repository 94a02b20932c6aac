package fencerun

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/toh-sandbox/toh/policy"
	"github.com/toh-sandbox/toh/sandbox"
)

// HostArg is the first argument that makes toh-mount the fence host of one run.
const HostArg = "__fence-run"

// hostBinary is the program that serves the fence: toh-mount, installed beside
// toh-exec. toh-exec does not link the fence itself, so that its runs without
// --fence pay nothing for it (go-fuse's package initialization alone costs about
// 0.3 ms per start on the development machine).
const hostBinary = "toh-mount"

// setupTimeout bounds how long toh-exec waits for the host to fence every root.
const setupTimeout = 60 * time.Second

// Report is the host's last line on the result descriptor: what the fence saw.
type Report struct {
	Roots   []string         `json:"roots"`
	Denials []sandbox.Denial `json:"denials"`
	Dropped int              `json:"dropped"`
	// ExecFailure is set when the stage could not exec the runner (the command never
	// ran): a runner failure.
	ExecFailure string `json:"execFailure,omitempty"`
}

// Client is toh-exec's side of a fenced run; it implements [sandbox.Stage]: Run
// starts the host (toh-mount __fence-run) in place of the runner argv, and the host
// starts the stage, serves the fences, and execs nothing itself.
type Client struct {
	host  string
	pol   policy.Execution
	roots []string
	guard []string

	r, w *os.File
	br   *bufio.Reader
	// report is the rest of the result pipe after "ready", read while the run goes
	// on: a report larger than the pipe's buffer would otherwise block the host's
	// write while toh-exec waits for the host to exit.
	report chan []byte
}

var _ sandbox.Stage = (*Client)(nil)

// New prepares a fenced run confined by pol whose runner argv expects roots to be
// fenced, whose fences also keep the files guard read-only (toh-exec's probe cache:
// the runner keeps it read-only, but the fence resolves links on the host, where a
// link in one fenced root could reach it; found by review). self is the absolute
// path of the toh-exec binary; the host is the toh-mount beside it (a fixed place:
// nothing in the environment chooses it).
func New(self string, pol policy.Execution, roots, guard []string) (*Client, error) {
	if runtime.GOOS != "linux" {
		return nil, errors.New("the fence needs Linux (FUSE in a mount namespace of the run)")
	}
	if self == "" {
		return nil, errors.New("the toh-exec binary is unknown")
	}
	host := filepath.Join(filepath.Dir(self), hostBinary)
	fi, err := os.Stat(host)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		if err == nil {
			err = errors.New("not an executable file")
		}
		return nil, fmt.Errorf("the fence is served by %s, which must be installed beside toh-exec: %w", hostBinary, err)
	}
	return &Client{host: host, pol: pol, roots: append([]string(nil), roots...), guard: append([]string(nil), guard...)}, nil
}

// Wrap makes cmd start the host with the runner's program and argv as arguments.
func (c *Client) Wrap(cmd *exec.Cmd) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	c.r, c.w, c.br = r, w, bufio.NewReader(r)
	pol, err := json.Marshal(c.pol)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	args := []string{c.host, HostArg, "--result-fd", strconv.Itoa(3 + len(cmd.ExtraFiles)),
		"--policy-json", string(pol), "--cwd", cmd.Dir, "--path", cmd.Path}
	for _, root := range c.roots {
		args = append(args, "--root", root)
	}
	for _, g := range c.guard {
		args = append(args, "--guard", g)
	}
	cmd.Args = append(append(args, "--"), cmd.Args...)
	cmd.Path = c.host
	// The host must not outlive toh-exec: killed during the setup, toh-exec would
	// otherwise leave a host that goes on to start the command, unreported.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	dieWithParent(cmd.SysProcAttr)
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	return nil
}

// Started waits until the host reports every root fenced, or why it cannot be.
func (c *Client) Started() error {
	c.w.Close()
	c.w = nil
	c.r.SetReadDeadline(time.Now().Add(setupTimeout))
	line, err := c.br.ReadString('\n')
	c.r.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		return fmt.Errorf("fence: %s ended before the command started (%v)", hostBinary, err)
	case line == "ready\n":
		c.report = make(chan []byte, 1)
		go func() {
			// Only the host holds the write end (close-on-exec there): EOF comes
			// when it exits, whatever the command left running.
			rest, _ := io.ReadAll(c.br)
			c.report <- rest
		}()
		return nil
	case strings.HasPrefix(line, "error "):
		// The host's own errors already say "fence: ".
		msg := strings.TrimSpace(strings.TrimPrefix(line, "error "))
		return errors.New("fence: " + strings.TrimPrefix(msg, "fence: "))
	}
	return fmt.Errorf("fence: unexpected report from %s: %q", hostBinary, line)
}

// Finished reads the host's report. A host that ended without one (killed, or
// crashed: its mounts then failed every operation with ENOTCONN) is Lost: nothing
// can be said about what it refused, nor whether the command ran
// (sandbox.FenceLostError).
func (c *Client) Finished() (*sandbox.FenceFacts, string) {
	if c.w != nil {
		c.w.Close()
	}
	facts := &sandbox.FenceFacts{Roots: append([]string{}, c.roots...), Denials: []sandbox.Denial{}}
	if c.r == nil {
		return facts, ""
	}
	defer c.r.Close()
	// The host has been reaped; its report, if any, is in the pipe already (or
	// being read since the start).
	c.r.SetReadDeadline(time.Now().Add(time.Second))
	var rest []byte
	if c.report != nil {
		rest = <-c.report
	} else {
		rest, _ = io.ReadAll(c.br)
	}
	var rep Report
	if err := json.Unmarshal(rest, &rep); err != nil {
		facts.Lost = true
		return facts, fmt.Sprintf("toh-exec: fence: %s ended without reporting the run's denials", hostBinary)
	}
	if rep.Denials != nil {
		facts.Denials = rep.Denials
	}
	facts.Dropped = rep.Dropped
	return facts, rep.ExecFailure
}
