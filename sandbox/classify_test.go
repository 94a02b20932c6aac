package sandbox

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func dialectConfined(b Backend) Confined {
	var c Confined
	c.Backend = b
	switch b {
	case BackendBwrap:
		c.DenialSignatures, c.RunnerFailureRules = BwrapDialect()
	case BackendLandlock:
		c.DenialSignatures, c.RunnerFailureRules = LandlockDialect()
	case BackendSeatbelt:
		c.DenialSignatures, c.RunnerFailureRules = SeatbeltDialect()
	}
	return c
}

const landlockPartialNotice = "landlock-run: partial enforcement (older Landlock ABI)"

func classifyExit(n int) Exit { return Exit{Code: n} }

func TestClassify(t *testing.T) {
	denied := Classification{Denied: true}
	failed := func(line string) Classification { return Classification{RunnerFailed: true, Detail: line} }
	tests := []struct {
		name    string
		backend Backend
		exit    Exit
		stderr  string
		want    Classification
	}{
		// Landlock: the partial-enforcement notice is never a failure, whatever the status.
		{"landlock notice exit 0", BackendLandlock, classifyExit(0), landlockPartialNotice + "\n", Classification{}},
		{"landlock notice exit 1", BackendLandlock, classifyExit(1), landlockPartialNotice + "\n", Classification{}},
		{"landlock notice exit 2", BackendLandlock, classifyExit(2), landlockPartialNotice + "\n", Classification{}},
		{"landlock notice exit 125", BackendLandlock, classifyExit(125), landlockPartialNotice + "\n", Classification{}},
		{"landlock notice CRLF exit 125", BackendLandlock, classifyExit(125), landlockPartialNotice + "\r\n", Classification{}},
		{"landlock notice other case and spaces", BackendLandlock, classifyExit(125), "  LANDLOCK-RUN: Partial Enforcement (Older Landlock ABI)\t\n", Classification{}},
		{"landlock fatal after notice", BackendLandlock, classifyExit(125),
			landlockPartialNotice + "\nlandlock-run: opening rule path \"/w\": no such file or directory\n",
			failed(`landlock-run: opening rule path "/w": no such file or directory`)},
		{"landlock fatal CRLF", BackendLandlock, classifyExit(125),
			"landlock-run: exec: \"nope\": not found\r\n", failed(`landlock-run: exec: "nope": not found`)},
		{"landlock first matching line, not first line", BackendLandlock, classifyExit(125),
			"child noise\n" + landlockPartialNotice + "\nlandlock-run: first\nlandlock-run: second\n", failed("landlock-run: first")},
		{"landlock marker needs exit 125", BackendLandlock, classifyExit(1),
			"landlock-run: looks fatal\n", Classification{}},
		{"landlock marker at 125 outranks denial", BackendLandlock, classifyExit(125),
			"Permission denied\nlandlock-run: restricting: operation not supported\n",
			failed("landlock-run: restricting: operation not supported")},
		{"landlock notice plus child denial", BackendLandlock, classifyExit(1),
			landlockPartialNotice + "\nsh: 1: cannot create /etc/x: Permission denied\n", denied},
		{"landlock child exits 125 with denial", BackendLandlock, classifyExit(125),
			landlockPartialNotice + "\ntouch: cannot touch '/x': Permission denied\n", denied},
		{"landlock marker is case-sensitive", BackendLandlock, classifyExit(125), "LANDLOCK-RUN: boom\n", Classification{}},
		{"landlock notice as a substring is not the notice", BackendLandlock, classifyExit(125),
			"echo " + landlockPartialNotice + "\n", failed("echo " + landlockPartialNotice)},

		// bwrap
		{"bwrap cannot mkdir", BackendBwrap, classifyExit(1),
			"bwrap: Can't mkdir /w: Read-only file system\n", failed("bwrap: Can't mkdir /w: Read-only file system")},
		{"bwrap denial", BackendBwrap, classifyExit(1), "touch: cannot touch '/etc/x': Read-only file system\n", denied},
		{"bwrap denial exit 0", BackendBwrap, classifyExit(0), "touch: cannot touch '/etc/x': Read-only file system\n", Classification{}},
		{"bwrap runner line exit 0", BackendBwrap, classifyExit(0), "bwrap: Can't mkdir /w\n", Classification{}},
		{"bwrap denial without trailing newline", BackendBwrap, classifyExit(2), "x: READ-ONLY FILE SYSTEM", denied},
		{"bwrap runner failure at any status", BackendBwrap, classifyExit(42), "noise\nbwrap: execvp nope: No such file or directory", failed("bwrap: execvp nope: No such file or directory")},
		{"bwrap 127 is ordinary", BackendBwrap, classifyExit(127), "sh: 1: nope: not found\n", Classification{}},
		{"bwrap 126 is ordinary", BackendBwrap, classifyExit(126), "sh: 1: ./x: Permission denied\n", Classification{}},
		{"bwrap plain failure", BackendBwrap, classifyExit(1), "grep: no match\n", Classification{}},

		// Seatbelt
		{"seatbelt denial", BackendSeatbelt, classifyExit(1), "touch: /x: Operation not permitted\n", denied},
		{"seatbelt runner failure", BackendSeatbelt, classifyExit(65),
			"sandbox-exec: sandbox_apply: Operation not permitted\n", failed("sandbox-exec: sandbox_apply: Operation not permitted")},

		// A signal death is nothing, whatever stderr says.
		{"signal with bwrap dialect", BackendBwrap, Exit{Signaled: true, Signal: 9},
			"bwrap: Can't mkdir /w\nRead-only file system\n", Classification{}},
		{"signal with landlock dialect", BackendLandlock, Exit{Signaled: true, Signal: 15, Code: 125},
			"landlock-run: boom\nPermission denied\n", Classification{}},
		{"spawn error", BackendBwrap, Exit{SpawnErr: syscall.ENOENT, Code: 1},
			"bwrap: x\nRead-only file system\n", Classification{}},

		// Never the union: another backend's words mean nothing.
		{"landlock denial under bwrap", BackendBwrap, classifyExit(1), "sh: cannot create /x: Permission denied\n", Classification{}},
		{"seatbelt denial under bwrap", BackendBwrap, classifyExit(1), "touch: /x: Operation not permitted\n", Classification{}},
		{"bwrap denial under landlock", BackendLandlock, classifyExit(1), "x: Read-only file system\n", Classification{}},
		{"seatbelt denial under landlock", BackendLandlock, classifyExit(1), "x: Operation not permitted\n", Classification{}},
		{"bwrap denial under seatbelt", BackendSeatbelt, classifyExit(1), "x: Read-only file system\n", Classification{}},
		{"landlock denial under seatbelt", BackendSeatbelt, classifyExit(1), "x: Permission denied\n", Classification{}},
		{"bwrap marker under landlock", BackendLandlock, classifyExit(125), "bwrap: Can't mkdir\n", Classification{}},
		{"landlock marker under bwrap", BackendBwrap, classifyExit(125), "landlock-run: boom\n", Classification{}},
		{"sandbox-exec marker under bwrap", BackendBwrap, classifyExit(1), "sandbox-exec: boom\n", Classification{}},
		{"bwrap marker under seatbelt", BackendSeatbelt, classifyExit(1), "bwrap: boom\n", Classification{}},

		// An empty dialect classifies nothing rather than everything.
		{"empty dialect", "", classifyExit(1), "bwrap: x\nanything\n", Classification{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(dialectConfined(tt.backend), tt.exit, []byte(tt.stderr))
			if got != tt.want {
				t.Errorf("Classify(%s, %+v, %q) = %+v, want %+v", tt.backend, tt.exit, tt.stderr, got, tt.want)
			}
		})
	}
}

// Empty signatures and markers in a hand-built Confined must match nothing.
func TestClassifyIgnoresEmptyDialectEntries(t *testing.T) {
	c := Confined{DenialSignatures: []string{""}, RunnerFailureRules: RunnerFailureRules{Marker: ""}}
	if got := Classify(c, classifyExit(1), []byte("any text\n")); got != (Classification{}) {
		t.Errorf("Classify with empty dialect entries = %+v, want nothing", got)
	}
}

// Each call returns its own slices, so one caller's change cannot leak into another's.
func TestClassifyDialectsAreFresh(t *testing.T) {
	for name, d := range map[string]func() ([]string, RunnerFailureRules){
		"bwrap": BwrapDialect, "landlock": LandlockDialect, "seatbelt": SeatbeltDialect,
	} {
		den, rules := d()
		den[0] = "mutated"
		if len(rules.Except) > 0 {
			rules.Except[0] = "mutated"
		}
		den2, rules2 := d()
		if den2[0] == "mutated" || (len(rules2.Except) > 0 && rules2.Except[0] == "mutated") {
			t.Errorf("%s dialect shares its slices between calls", name)
		}
	}
}

func FuzzClassify(f *testing.F) {
	backends := []Backend{BackendBwrap, BackendLandlock, BackendSeatbelt}
	f.Add(uint8(1), 125, false, false, []byte(landlockPartialNotice+"\nlandlock-run: fatal\n"))
	f.Add(uint8(0), 1, false, false, []byte("bwrap: Can't mkdir /x\n"))
	f.Add(uint8(0), 1, false, false, []byte("x: Read-only file system\r\n"))
	f.Add(uint8(2), 1, false, false, []byte("sandbox-exec: y\nOperation not permitted"))
	f.Add(uint8(1), 125, true, false, []byte("landlock-run: z\n"))
	f.Add(uint8(1), 125, false, true, []byte("landlock-run: z\n"))
	f.Add(uint8(1), 0, false, false, []byte("\xff\xfe\r\r\n\n"))
	f.Fuzz(func(t *testing.T, b uint8, status int, signaled, spawnErr bool, tail []byte) {
		c := dialectConfined(backends[int(b)%len(backends)])
		exit := Exit{Code: status, Signaled: signaled, Signal: 9}
		if spawnErr {
			exit.SpawnErr = errors.New("spawn failed")
		}
		got := Classify(c, exit, tail)

		if got.Denied && got.RunnerFailed {
			t.Fatalf("both denied and runner failed: %+v", got)
		}
		if (signaled || spawnErr || status == 0) && got != (Classification{}) {
			t.Fatalf("exit %+v classified as %+v, want nothing", exit, got)
		}
		if !got.RunnerFailed && got.Detail != "" {
			t.Fatalf("detail %q without a runner failure", got.Detail)
		}
		if got.RunnerFailed {
			rules := c.RunnerFailureRules
			if !strings.Contains(got.Detail, rules.Marker) || strings.Contains(got.Detail, "\n") {
				t.Fatalf("detail %q is not one line containing %q", got.Detail, rules.Marker)
			}
			isLine := false
			for _, l := range strings.Split(string(tail), "\n") {
				if strings.TrimSuffix(l, "\r") == got.Detail {
					isLine = true
					break
				}
			}
			if !isLine {
				t.Fatalf("detail %q is not a line of %q", got.Detail, tail)
			}
			if rules.ExitStatus != 0 && status != rules.ExitStatus {
				t.Fatalf("runner failure at exit %d, rules require %d", status, rules.ExitStatus)
			}
			if isExcepted(got.Detail, rules.Except) {
				t.Fatalf("detail %q is an excepted notice", got.Detail)
			}
		}
	})
}
