package sandbox

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/toh-sandbox/toh/policy"
)

// UnavailableError is SANDBOX_UNAVAILABLE (SPEC §4.4): no backend can confine a call in
// Mode, so the command is refused rather than run unconfined. It is also the error of a
// run whose runner failed at run time; RunnerFailure then holds the runner's line.
type UnavailableError struct {
	Mode policy.Mode
	// RunnerFailure is the stderr line that showed the runner failing at run time, or "".
	RunnerFailure string
	// Cause is the internal reason (probe results, spawn error). It is for errors.Is/As
	// and logs; Error() does not print it, because the text is an exact contract.
	Cause error
}

// UnavailableCode is the error code of [*UnavailableError].
const UnavailableCode = "SANDBOX_UNAVAILABLE"

// The exact texts of SPEC §4.4, split around their <mode> placeholder. Harnesses and
// models key on them byte for byte (the dashes are U+2014).
const (
	unavailablePrefix   = "sandbox mode "
	unavailableSuffix   = " is requested but no sandbox backend is usable on this host; refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing kernel (Linux), ensure sandbox-exec is usable (macOS), or ensure the ACL restricted-token runner can start (Windows) — otherwise switch the consumer to danger-full-access."
	runnerFailurePrefix = " Runner failure: "

	runnerNoticePrefix = "[sandbox: the sandbox runner itself failed under "
	runnerNoticeSuffix = " mode — the command did not run; this is a sandbox problem, not a command failure]"
)

// Error returns the exact SPEC §4.4 text, followed by " Runner failure: <detail>" when
// RunnerFailure is set. The mode is printed in double quotes with Go escaping, which
// is the bare mode for every valid one. Control characters in the detail (a line of a
// stderr that the confined command may have written) are replaced with U+FFFD so it
// cannot rewrite the reader's terminal; an ordinary line is printed unchanged.
func (e *UnavailableError) Error() string {
	msg := unavailablePrefix + strconv.Quote(string(e.Mode)) + unavailableSuffix
	if e.RunnerFailure != "" {
		msg += runnerFailurePrefix + printable(e.RunnerFailure)
	}
	return msg
}

// Code returns "SANDBOX_UNAVAILABLE".
func (e *UnavailableError) Code() string { return UnavailableCode }

// Unwrap returns Cause.
func (e *UnavailableError) Unwrap() error { return e.Cause }

// RunnerFailureNotice is the background runner-failure text of SPEC §4.4 for a run
// under mode m whose runner failed, so the command did not run.
func RunnerFailureNotice(m policy.Mode) string {
	return runnerNoticePrefix + string(m) + runnerNoticeSuffix
}

// printable replaces control characters other than tab with U+FFFD.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\t' {
			return unicode.ReplacementChar
		}
		return r
	}, s)
}
