//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// resultPort is the serial port that carries only result lines.
const resultPort = "/dev/ttyS1"

// reporter writes one result line per check.
type reporter struct {
	leg, kernel string
	w           io.Writer
	f           *os.File
	n           int
}

func newReporter(leg string) *reporter {
	var u unix.Utsname
	unix.Uname(&u)
	r := &reporter{leg: leg, kernel: unix.ByteSliceToString(u.Release[:]), w: os.Stderr}
	if f, err := os.OpenFile(resultPort, os.O_WRONLY|unix.O_NOCTTY, 0); err == nil {
		r.f = f
		r.w = io.MultiWriter(f, os.Stderr)
	} else {
		fmt.Fprintf(os.Stderr, "toh-vm-guest: %v; results go to the console\n", err)
	}
	return r
}

// add records one check. expected and observed are short human-readable summaries;
// ok says whether observed satisfies expected.
func (r *reporter) add(check, expected, observed string, ok bool) {
	status := "FAIL"
	if ok {
		status = "ok"
	}
	r.line(check, expected, observed, status)
}

// skip records a check that could not be made, with the reason.
func (r *reporter) skip(check, expected, reason string) {
	r.line(check, expected, "-", "SKIP("+field(reason)+")")
}

// detail prints supporting evidence for a check (a stderr line, an error) that the
// host shows under the table when the check failed.
func (r *reporter) detail(check, text string) {
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(r.w, "TOH-DETAIL|leg=%s|check=%s|%s\n", r.leg, check, field(l))
	}
}

func (r *reporter) line(check, expected, observed, status string) {
	r.n++
	fmt.Fprintf(r.w, "TOH-RESULT|leg=%s|kernel=%s|check=%s|expected=%s|observed=%s|%s\n",
		r.leg, r.kernel, field(check), field(expected), field(observed), status)
}

func (r *reporter) done() {
	fmt.Fprintf(r.w, "TOH-DONE|leg=%s|checks=%d\n", r.leg, r.n)
}

func (r *reporter) close() {
	if r.f != nil {
		r.f.Sync()
		r.f.Close()
	}
}

// field makes s safe inside one |-separated field of one line.
func field(s string) string {
	s = strings.NewReplacer("|", "/", "\n", " ", "\r", " ", "\t", " ").Replace(s)
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
