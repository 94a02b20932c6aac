//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"
)

// The host splits result lines on "|" and reads one line per check: nothing a check
// observes may add a field or a line.
func TestResultLineStaysOneLineOfSixFields(t *testing.T) {
	var b bytes.Buffer
	r := &reporter{leg: "3", kernel: "6.12.0", w: &b}
	r.add("doctor", "a|b", "line one\nline two|x\r\tend", false)
	r.skip("fence", "mounted", "not | built\n")
	r.done()
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), b.String())
	}
	for _, l := range lines[:2] {
		if n := len(strings.Split(l, "|")); n != 7 {
			t.Errorf("%d fields, want 7: %q", n, l)
		}
	}
	if !strings.HasSuffix(lines[0], "|FAIL") || !strings.HasSuffix(lines[1], "|SKIP(not / built )") {
		t.Errorf("statuses: %q", lines[:2])
	}
	if lines[2] != "TOH-DONE|leg=3|checks=2" {
		t.Errorf("done line %q", lines[2])
	}
}

func TestSummaryReadsTheJSONEnvelope(t *testing.T) {
	for _, c := range []struct {
		res  result
		want string
	}{
		{result{code: 0, stdout: `{"result":{"mode":"read-only","denied":false,"enforcement":"partial","backend":"landlock","runnerFailed":false,"exitCode":0},"stdout":"","stderr":""}`},
			"exit=0 backend=landlock enforcement=partial"},
		{result{code: 1, stdout: `{"result":{"denied":true,"enforcement":"full","backend":"bwrap","exitCode":1}}`},
			"exit=1 backend=bwrap enforcement=full denied"},
		{result{code: 123, stdout: `{"error":{"code":"SANDBOX_UNAVAILABLE","message":"..."}}`},
			"exit=123 error=SANDBOX_UNAVAILABLE"},
		{result{code: 2, stdout: "toh-exec: usage"}, "exit=2 (no JSON)"},
	} {
		if got := c.res.summary(); got != c.want {
			t.Errorf("summary(%s) = %q, want %q", c.res.stdout, got, c.want)
		}
	}
}

func TestCountLines(t *testing.T) {
	stderr := noticePartial + "\n\nsh: x: Permission denied\n"
	if n := countLines(stderr, noticePartial); n != 1 {
		t.Errorf("notice lines %d, want 1", n)
	}
	if n := countLines(stderr, ""); n != 2 {
		t.Errorf("non-empty lines %d, want 2", n)
	}
}
