package sandbox

import (
	"strings"
)

// Exit is how a confined run ended, as the caller observed it.
type Exit struct {
	// Code is the exit status; valid only when !Signaled && SpawnErr == nil.
	Code int
	// Signaled is true when the process died of a signal (Signal).
	Signaled bool
	Signal   int
	// SpawnErr is the error of starting the runner, if it never started.
	SpawnErr error
}

// Classification is what a finished run's stderr says happened, read in the dialect of
// the backend that confined it. Denied and RunnerFailed are never both true.
type Classification struct {
	// Denied: the backend denied a file effect (the command ran).
	Denied bool
	// RunnerFailed: the runner itself failed and the command never ran.
	RunnerFailed bool
	// Detail is the original stderr line that showed the runner failure, or "".
	Detail string
}

// Classify reads a finished run in c's own dialect (SPEC §4.3). It is a report, not a
// boundary: the confined command controls its stderr and can imitate either dialect,
// which is why [Run] asks the runner's status pipe first (status.go) and reads the
// runner-failure rule only when no runner said the command started.
//
//   - A spawn error yields the zero Classification: whether it is a runner failure
//     depends on which program failed and why, which only the spawner knows.
//   - A signal death, and exit 0, are neither denial nor runner failure, whatever
//     stderr says.
//   - Runner failure outranks denial. It is the first stderr line (lines split on "\n",
//     a trailing "\r" dropped) that contains c.RunnerFailureRules.Marker
//     (case-sensitively) and is not, as a whole trimmed line and case-insensitively, one
//     of its Except notices, provided ExitStatus is 0 or equals the exit status. Its
//     Detail is that line, not the first line of stderr. An empty Marker never matches.
//   - Otherwise the run was denied when the tail contains, case-insensitively, one of
//     c.DenialSignatures (empty ones ignored).
//
// Exit 126 and 127 get no special meaning: after a successful launch they are the
// child's own statuses, and they are runner failures only through the marker rule.
// Only c's dialect counts, never the union of all backends': the same words mean
// different things under different backends.
func Classify(c Confined, exit Exit, stderrTail []byte) Classification {
	if exit.SpawnErr != nil || exit.Signaled || exit.Code == 0 {
		return Classification{}
	}
	tail := string(stderrTail)

	if line, ok := runnerFailureLine(c.RunnerFailureRules, exit.Code, tail); ok {
		return Classification{RunnerFailed: true, Detail: line}
	}

	lower := strings.ToLower(tail)
	for _, sig := range c.DenialSignatures {
		if sig != "" && strings.Contains(lower, strings.ToLower(sig)) {
			return Classification{Denied: true}
		}
	}
	return Classification{}
}

// runnerFailureLine returns the first line of tail that rules count as a runner failure
// of a run that exited with code.
func runnerFailureLine(rules RunnerFailureRules, code int, tail string) (string, bool) {
	if rules.Marker == "" || (rules.ExitStatus != 0 && rules.ExitStatus != code) {
		return "", false
	}
	for line := range strings.SplitSeq(tail, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.Contains(line, rules.Marker) && !isExcepted(line, rules.Except) {
			return line, true
		}
	}
	return "", false
}

func isExcepted(line string, except []string) bool {
	line = strings.TrimSpace(line)
	for _, e := range except {
		if strings.EqualFold(line, strings.TrimSpace(e)) {
			return true
		}
	}
	return false
}

// The dialects below are the backends' own words (SPEC §4.3). Each call returns fresh
// slices, so a caller that alters its copy cannot change anyone else's dialect.

// BwrapDialect is bwrap's dialect: a read-only bind shows as EROFS; bwrap prefixes its
// own errors with "bwrap: " and exits 1, like a child might, so no exit status is
// required.
func BwrapDialect() (denial []string, rules RunnerFailureRules) {
	return []string{"read-only file system"}, RunnerFailureRules{Marker: "bwrap: "}
}

// LandlockDialect is the Landlock launcher's dialect: a denied access shows as EACCES;
// every launcher failure exits 125 with one "landlock-run: " line, and the
// partial-enforcement notice carries the same prefix without being a failure.
func LandlockDialect() (denial []string, rules RunnerFailureRules) {
	return []string{"permission denied"}, RunnerFailureRules{
		Marker:     "landlock-run: ",
		ExitStatus: 125,
		Except:     []string{"landlock-run: partial enforcement (older Landlock ABI)"},
	}
}

// SeatbeltDialect is sandbox-exec's dialect: a denied access shows as EPERM; the runner
// prefixes its own errors with "sandbox-exec: ".
func SeatbeltDialect() (denial []string, rules RunnerFailureRules) {
	return []string{"operation not permitted"}, RunnerFailureRules{Marker: "sandbox-exec: "}
}
