// Package approval asks someone whether one call may run under a wider sandbox mode
// (SPEC §6). It owns the approver channels: the controlling terminal, an external
// command that receives the request as JSON, and "never" for delegated children.
//
// # Threat model
//
// The request is shown to a person who decides; the confined command has not run yet,
// so nothing it printed can answer the prompt. Only an exact "allowed-once" grants:
// every other answer, a crash or malformed output of the approval command, or an
// interrupted prompt is a refusal. A grant covers one call and is never persisted.
package approval

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/toh-sandbox/toh/internal/textsafe"
	"github.com/toh-sandbox/toh/policy"
)

// Outcome is an approver's answer.
type Outcome string

const (
	AllowedOnce Outcome = "allowed-once"
	Rejected    Outcome = "rejected"
	Cancelled   Outcome = "cancelled"
	Unavailable Outcome = "unavailable"
)

// Request is what the approver is shown, and what an approval command receives as
// one JSON object on its standard input.
//
// Program is the file argv[0] was found as (in $PATH for a name), which is what runs:
// the approver sees ".venv/bin/bash" where argv says "bash" (found by review).
// WritableRoots and Network are what the grant runs with; a danger-full-access grant
// has no sandbox and no roots.
type Request struct {
	Subject       string         `json:"subject"`
	Argv          []string       `json:"argv"`
	Program       string         `json:"program"`
	Cwd           string         `json:"cwd"`
	SessionID     string         `json:"sessionID,omitempty"`
	WorkspaceRoot string         `json:"workspaceRoot"`
	CurrentMode   policy.Mode    `json:"currentMode"`
	RequestedMode policy.Mode    `json:"requestedMode"`
	WritableRoots []string       `json:"writableRoots"`
	Network       policy.Network `json:"network"`
	Justification string         `json:"justification"`
}

// Approver answers one request.
type Approver interface {
	Ask(ctx context.Context, req Request) (Outcome, error)
}

// Choose picks the channel: approval "never" rejects without asking; an approval
// command, when given, is asked; otherwise the controlling terminal, which is
// Unavailable when the process has none.
func Choose(a policy.Approval, command string) Approver {
	switch {
	case a == policy.ApprovalNever:
		return Never{}
	case command != "":
		return Command{Path: command}
	default:
		return Terminal{Path: "/dev/tty"}
	}
}

// Never rejects deterministically (approval "never", for delegated children).
type Never struct{}

func (Never) Ask(context.Context, Request) (Outcome, error) { return Rejected, nil }

// Command runs an external program with the request as JSON on stdin. Its first line
// of stdout must be exactly one of allowed-once, rejected or cancelled; anything else
// (or a non-zero exit) is reported as an error with outcome Cancelled.
//
// Dir and Env, when set, are its working directory and environment (toh-exec runs it
// in "/" with a $PATH that no confined call can write in; see approverEnv there).
type Command struct {
	Path string
	Dir  string
	Env  []string
}

func (c Command) Ask(ctx context.Context, req Request) (Outcome, error) {
	if field := notUTF8(req); field != "" {
		// JSON would carry U+FFFD in its place: "a\xffb" and "a\uFFFDb" would
		// read the same, and the approver could not see what runs (found by review).
		return Cancelled, fmt.Errorf("approval command %q not asked: the request's %s is not valid UTF-8, which JSON cannot carry exactly; ask on the terminal instead", c.Path, field)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Cancelled, err
	}
	cmd := exec.CommandContext(ctx, c.Path)
	cmd.Dir, cmd.Env = c.Dir, c.Env
	cmd.Stdin = bytes.NewReader(append(body, '\n'))
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return Cancelled, fmt.Errorf("approval command %q: %w", c.Path, err)
	}
	line, _, _ := strings.Cut(stdout.String(), "\n")
	switch o := Outcome(strings.TrimSpace(line)); o {
	case AllowedOnce, Rejected, Cancelled:
		return o, nil
	default:
		return Cancelled, fmt.Errorf("approval command %q answered %q (want allowed-once, rejected or cancelled)", c.Path, line)
	}
}

// notUTF8 names the first text of req that is not valid UTF-8, or "".
func notUTF8(req Request) string {
	for i, a := range req.Argv {
		if !utf8.ValidString(a) {
			return fmt.Sprintf("argv[%d]", i)
		}
	}
	for i, r := range req.WritableRoots {
		if !utf8.ValidString(r) {
			return fmt.Sprintf("writableRoots[%d]", i)
		}
	}
	for _, f := range []struct{ name, s string }{{"program", req.Program}, {"cwd", req.Cwd},
		{"workspaceRoot", req.WorkspaceRoot}, {"justification", req.Justification}, {"sessionID", req.SessionID}} {
		if !utf8.ValidString(f.s) {
			return f.name
		}
	}
	return ""
}

// Terminal prompts on the controlling terminal.
type Terminal struct {
	Path string
}

func (t Terminal) Ask(ctx context.Context, req Request) (Outcome, error) {
	tty, err := os.OpenFile(t.Path, os.O_RDWR, 0)
	if err != nil {
		return Unavailable, nil
	}
	defer tty.Close()
	// An interrupt while the prompt is open cancels the request instead of killing
	// toh-exec half-way.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// Input typed before the prompt was shown answers nothing: it is discarded, as
	// sudo does (found by review: a "y" typed ahead granted at once).
	flushInput(int(tty.Fd()))
	writable := "everything (no sandbox)"
	if req.RequestedMode != policy.DangerFullAccess {
		writable = quoteArgv(req.WritableRoots)
	}
	program := quoteArgv([]string{req.Program})
	fmt.Fprintf(tty, "toh: escalation requested\n  command:       %s\n  program:       %s\n  cwd:           %s\n  mode:          %s -> %s\n  writable:      %s\n  justification: %s\nAllow %s once under %q? [y/N] ",
		quoteArgv(req.Argv), program, quoteArgv([]string{req.Cwd}), req.CurrentMode, req.RequestedMode, writable,
		quoteLong(req.Justification), program, req.RequestedMode)
	answer := make(chan string, 1)
	go func() {
		line, err := bufio.NewReader(tty).ReadString('\n')
		if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
			answer <- "\x00eof"
			return
		}
		answer <- line
	}()
	select {
	case <-sigs:
		fmt.Fprintln(tty)
		return Cancelled, nil
	case <-ctx.Done():
		return Cancelled, ctx.Err()
	case line := <-answer:
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return AllowedOnce, nil
		case "\x00eof":
			return Cancelled, nil
		default:
			return Rejected, nil
		}
	}
}

// quoteArgv shows argv the way a shell would need it typed, with every
// non-printable character escaped. What could push the rest of the command off the
// screen is shown by count outside the quotes, so it cannot be mistaken for the
// argument's own text: a run of more than 16 spaces as ⟨N spaces⟩ (a justification
// of "run the tests" with "curl … | sh;" and 4,000 spaces before "make test" left
// only "make test" on the screen; found by review), and the middle of an argument
// longer than 2,000 characters as ⟨N more bytes⟩.
func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || len(a) > maxShown || strings.ContainsAny(a, " \t\n'\"\\$`") || textsafe.Visible(a) != a {
			q[i] = quoteLong(a)
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}

const (
	maxSpaceRun = 16   // longer runs of spaces are shown by count
	maxShown    = 2000 // longer arguments are shown by their ends
)

// quoteLong quotes a with strconv.QuoteToGraphic, in pieces around the runs of
// spaces and the middles that quoteArgv shows by count.
func quoteLong(a string) string {
	var b strings.Builder
	run := strings.Repeat(" ", maxSpaceRun+1)
	for a != "" {
		i := strings.Index(a, run)
		if i < 0 {
			b.WriteString(quoteText(a))
			break
		}
		if i > 0 {
			b.WriteString(quoteText(a[:i]))
		}
		rest := strings.TrimLeft(a[i:], " ")
		fmt.Fprintf(&b, "⟨%d spaces⟩", len(a)-i-len(rest))
		a = rest
	}
	if b.Len() == 0 {
		return `""`
	}
	return b.String()
}

// quoteText quotes s, showing only its ends when it is longer than maxShown, cut at
// character boundaries.
func quoteText(s string) string {
	if len(s) <= maxShown {
		return strconv.QuoteToGraphic(s)
	}
	h, t := maxShown*2/3, len(s)-maxShown/3
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	return strconv.QuoteToGraphic(s[:h]) + fmt.Sprintf("⟨%d more bytes⟩", t-h) + strconv.QuoteToGraphic(s[t:])
}
