package sandbox

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind statusKind
		in   string
		want runnerStatus
	}{
		// bwrap 0.8's output for a run that reached execve, and for one that did not.
		{"bwrap ran", statusBwrap, "{ \"child-pid\": 12, \"cgroup-namespace\": 4026531835, \"ipc-namespace\": 4026532300 }\n{ \"exit-code\": 1 }\n", runnerStatus{commandStarted: true}},
		{"bwrap exit 0", statusBwrap, "{ \"child-pid\": 12 }\n{ \"exit-code\": 0 }\n", runnerStatus{commandStarted: true}},
		{"bwrap failed", statusBwrap, "{ \"child-pid\": 12, \"cgroup-namespace\": 4026531835 }\n", runnerStatus{}},
		{"bwrap nothing", statusBwrap, "", runnerStatus{}},
		{"bwrap exit code not a number", statusBwrap, "{ \"exit-code\": \"x\" }\n", runnerStatus{}},
		{"bwrap torn record", statusBwrap, "{ \"exit-code\": 1", runnerStatus{}},
		{"launcher exec'd", statusLauncher, "", runnerStatus{commandStarted: true}},
		{"launcher failed", statusLauncher, "landlock-run: executing \"x\": no such file or directory\n", runnerStatus{failure: "landlock-run: executing \"x\": no such file or directory"}},
		{"launcher first line only", statusLauncher, "landlock-run: a\nlandlock-run: b\n", runnerStatus{failure: "landlock-run: a"}},
		{"no kind", statusNone, "{ \"exit-code\": 0 }\n", runnerStatus{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseStatus(tc.kind, []byte(tc.in)); got != tc.want {
				t.Errorf("parseStatus(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestWithStatusFD(t *testing.T) {
	bw := []string{"/usr/bin/bwrap", "--ro-bind", "/", "/", "--", "true"}
	if d := cmp.Diff([]string{"/usr/bin/bwrap", "--json-status-fd", "3", "--ro-bind", "/", "/", "--", "true"}, withStatusFD(statusBwrap, bw)); d != "" {
		t.Errorf("bwrap (-want +got):\n%s", d)
	}
	ll := []string{"/x/toh-exec", landlockStageArg, "--mode", "read-only", "--", "true"}
	got := withStatusFD(statusLauncher, ll)
	if d := cmp.Diff([]string{"/x/toh-exec", landlockStageArg, "--status-fd", "3", "--mode", "read-only", "--", "true"}, got); d != "" {
		t.Errorf("launcher (-want +got):\n%s", d)
	}
	if ll[2] != "--mode" {
		t.Errorf("withStatusFD changed its argument: %q", ll)
	}
	f, err := parseLandlockFlags(got[2:])
	if err != nil || f.statusFD != 3 || f.mode != "read-only" {
		t.Errorf("the launcher parses %q as %+v, %v", got[2:], f, err)
	}
	if d := cmp.Diff(bw, withStatusFD(statusNone, bw)); d != "" {
		t.Errorf("no kind (-want +got):\n%s", d)
	}
}

func TestLauncherStatusFD(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--status-fd", "3", "--mode", "read-only", "--", "true"}, 3},
		{[]string{"--mode", "bogus", "--status-fd", "7", "--", "true"}, 7},
		{[]string{"--status-fd", "2", "--", "true"}, 0},
		{[]string{"--status-fd", "x", "--", "true"}, 0},
		{[]string{"--status-fd"}, 0},
		{[]string{"--", "--status-fd", "3"}, 0},
		{[]string{"--mode", "read-only", "--", "true"}, 0},
	} {
		if got := launcherStatusFD(tc.args); got != tc.want {
			t.Errorf("launcherStatusFD(%q) = %d, want %d", tc.args, got, tc.want)
		}
	}
	for _, bad := range [][]string{
		{"--status-fd", "2", "--mode", "read-only", "--", "true"},
		{"--status-fd", "3", "--status-fd", "4", "--mode", "read-only", "--", "true"},
		{"--status-fd", "-1", "--mode", "read-only", "--", "true"},
	} {
		if _, err := parseLandlockFlags(bad); err == nil {
			t.Errorf("parseLandlockFlags(%q) accepted it", bad)
		}
	}
}

// FuzzParseStatus: whatever a status pipe carries, parsing never panics, a launcher
// failure is one line of it, and bwrap's record is believed only as a JSON object
// with a numeric "exit-code".
func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("{ \"child-pid\": 12 }\n{ \"exit-code\": 1 }\n"))
	f.Add([]byte("landlock-run: x\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got := parseStatus(statusBwrap, b); got.failure != "" || (got.commandStarted && !bytes.Contains(b, []byte(`"exit-code"`))) {
			t.Fatalf("bwrap %q: %+v", b, got)
		}
		got := parseStatus(statusLauncher, b)
		if got.commandStarted != (len(b) == 0) || strings.Contains(got.failure, "\n") || !bytes.HasPrefix(b, []byte(got.failure)) {
			t.Fatalf("launcher %q: %+v", b, got)
		}
	})
}
