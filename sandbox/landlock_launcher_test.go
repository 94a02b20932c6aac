package sandbox

import (
	"slices"
	"strings"
	"testing"

	"github.com/toh-sandbox/toh/policy"
)

func TestLandlockArgv(t *testing.T) {
	const self = "/usr/local/bin/toh-exec"
	argv := []string{"bash", "-c", "echo hi -- --mode x"}
	cases := []struct {
		name string
		pol  policy.Execution
		want []string
	}{
		{
			name: "read-only allow",
			pol:  policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow},
			want: []string{self, "__landlock-run", "--mode", "read-only", "--"},
		},
		{
			name: "read-only ignores stray roots",
			pol:  policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow, WritableRoots: []string{"/ws"}},
			want: []string{self, "__landlock-run", "--mode", "read-only", "--"},
		},
		{
			name: "workspace-write deny",
			pol: policy.Execution{Mode: policy.WorkspaceWrite, Network: policy.NetworkDeny,
				WritableRoots: []string{"/home/a/proj", "/tmp"}},
			want: []string{self, "__landlock-run", "--mode", "workspace-write", "--rw", "/home/a/proj", "--rw", "/tmp", "--net-deny", "--"},
		},
		{
			name: "unknown network fails closed",
			pol:  policy.Execution{Mode: policy.ReadOnly},
			want: []string{self, "__landlock-run", "--mode", "read-only", "--net-deny", "--"},
		},
		{
			name: "unknown mode passed through for the launcher to reject",
			pol:  policy.Execution{Mode: policy.DangerFullAccess, Network: policy.NetworkAllow},
			want: []string{self, "__landlock-run", "--mode", "danger-full-access", "--"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := LandlockArgv(self, tc.pol, argv)
			want := append(slices.Clone(tc.want), argv...)
			if !slices.Equal(got, want) {
				t.Fatalf("LandlockArgv:\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestLandlockArgvRoundTrip(t *testing.T) {
	pol := policy.Execution{Mode: policy.WorkspaceWrite, Network: policy.NetworkDeny,
		WritableRoots: []string{"/ws", "/tmp", "/with space"}}
	argv := []string{"--", "--mode", "read-only", "--probe", ""}
	full := LandlockArgv("/self", pol, argv)
	f, err := parseLandlockFlags(full[2:])
	if err != nil {
		t.Fatalf("parse(%q): %v", full[2:], err)
	}
	if f.mode != policy.WorkspaceWrite || !f.netDeny || f.probe || f.maxABI != 0 ||
		!slices.Equal(f.rw, pol.WritableRoots) || !slices.Equal(f.argv, argv) {
		t.Fatalf("round trip lost something: %+v", f)
	}
}

func TestLandlockFlags(t *testing.T) {
	ok := []struct {
		args []string
		want landlockFlags
	}{
		{[]string{"--probe"}, landlockFlags{mode: policy.ReadOnly, probe: true}},
		{[]string{"--probe", "--net-deny", "--"}, landlockFlags{mode: policy.ReadOnly, probe: true, netDeny: true}},
		{[]string{"--mode", "read-only", "--max-abi", "3", "--", "true"}, landlockFlags{mode: policy.ReadOnly, maxABI: 3, argv: []string{"true"}}},
	}
	for _, tc := range ok {
		got, err := parseLandlockFlags(tc.args)
		if err != nil {
			t.Errorf("parse(%q): %v", tc.args, err)
			continue
		}
		if got.mode != tc.want.mode || got.probe != tc.want.probe || got.netDeny != tc.want.netDeny ||
			got.maxABI != tc.want.maxABI || !slices.Equal(got.argv, tc.want.argv) || len(got.rw) != 0 {
			t.Errorf("parse(%q) = %+v, want %+v", tc.args, got, tc.want)
		}
	}

	bad := [][]string{
		nil,
		{"--", "true"},                    // no mode
		{"--mode", "read-only", "true"},   // no "--"
		{"--mode", "read-only"},           // no "--", no command
		{"--mode", "read-only", "--"},     // no command
		{"--mode", "read-only", "--", ""}, // empty command
		{"--mode", "danger-full-access", "--", "true"}, // not a confinable mode
		{"--mode", "Read-Only", "--", "true"},          // closed vocabulary
		{"--mode", "read-only", "--mode", "read-only", "--", "true"},
		{"--mode"},
		{"--mode", "workspace-write", "--rw", "rel/dir", "--", "true"},
		{"--mode", "workspace-write", "--rw", "/dev/../tmp", "--", "true"},
		{"--mode", "workspace-write", "--rw", "/tmp/", "--", "true"},
		{"--mode", "workspace-write", "--rw"},
		{"--mode", "read-only", "--rw", "/ws", "--", "true"},
		{"--mode", "read-only", "--max-abi", "0", "--", "true"},
		{"--mode", "read-only", "--max-abi", "x", "--", "true"},
		{"--mode", "read-only", "--max-abi", "2", "--max-abi", "3", "--", "true"},
		{"--mode", "read-only", "--bogus", "--", "true"},
		{"--mode=read-only", "--", "true"},
		{"--probe", "--", "true"},
		{"--probe", "--mode", "workspace-write", "--rw", "/ws"},
	}
	for _, args := range bad {
		if f, err := parseLandlockFlags(args); err == nil {
			t.Errorf("parse(%q) = %+v, want an error", args, f)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("parse(%q): multi-line error %q", args, err)
		}
	}
}

func TestLandlockEnforcementTable(t *testing.T) {
	ws := t.TempDir()
	ro := policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}
	roDeny := policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkDeny}
	wsw := policy.Execution{Mode: policy.WorkspaceWrite, Network: policy.NetworkAllow, WritableRoots: []string{ws, "/tmp"}}
	wswNoProtect := wsw
	wswNoProtect.Protect = []string{}
	wswDeny := wsw
	wswDeny.Network = policy.NetworkDeny
	wswPolicyInside := wsw
	wswPolicyInside.PolicyFile = ws + "/.toh/policy.json"
	wswPolicyOutside := wsw
	wswPolicyOutside.PolicyFile = "/etc/toh/policy.json"
	roPolicyInside := ro
	roPolicyInside.PolicyFile = ws + "/policy.json"
	wswRelative := wsw
	wswRelative.WritableRoots = []string{"rel"}
	danger := policy.Execution{Mode: policy.DangerFullAccess, Network: policy.NetworkAllow}
	noNet := policy.Execution{Mode: policy.ReadOnly}

	cases := []struct {
		name    string
		pol     policy.Execution
		abi     int
		seccomp bool
		want    Enforcement // "" means an error
	}{
		{"no landlock", ro, 0, true, ""},
		{"read-only ABI 1", ro, 1, true, EnforcementPartial},
		{"read-only ABI 4", ro, 4, true, EnforcementPartial},
		{"read-only ABI 5", ro, 5, true, EnforcementFull},
		{"read-only ABI 7", ro, 7, true, EnforcementFull},
		{"read-only ABI 99", ro, 99, true, EnforcementFull},
		{"read-only ABI 7 without seccomp", ro, 7, false, EnforcementPartial},
		{"read-only policy file anywhere", roPolicyInside, 7, true, EnforcementFull},
		{"network deny ABI 3 fails closed", roDeny, 3, true, ""},
		{"network deny ABI 4", roDeny, 4, true, EnforcementPartial},
		{"network deny ABI 5", roDeny, 5, true, EnforcementFull},
		{"network deny without seccomp fails closed", roDeny, 7, false, ""},
		{"network unset fails closed", noNet, 7, true, ""},
		{"workspace-write is partial (metadata)", wswNoProtect, 7, true, EnforcementPartial},
		{"workspace-write protect is partial", wsw, 7, true, EnforcementPartial},
		{"workspace-write ABI 1", wsw, 1, true, EnforcementPartial},
		{"workspace-write deny ABI 7", wswDeny, 7, true, EnforcementPartial},
		{"workspace-write deny ABI 3", wswDeny, 3, true, ""},
		{"policy file beneath a root fails closed", wswPolicyInside, 7, true, ""},
		{"policy file outside the roots", wswPolicyOutside, 7, true, EnforcementPartial},
		{"relative root", wswRelative, 7, true, ""},
		{"danger-full-access never reaches a provider", danger, 7, true, ""},
		{"empty mode", policy.Execution{Network: policy.NetworkAllow}, 7, true, ""},
	}
	for _, tc := range cases {
		got, err := landlockEnforcement(tc.pol, tc.abi, tc.seccomp)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s: got %q, want an error", tc.name, got)
		case tc.want != "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
		case got != tc.want:
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLandlockFailureLine(t *testing.T) {
	got := landlockFailureLine(landlockTestError("a\nb  c\n"))
	if got != "landlock-run: a b c" {
		t.Fatalf("got %q", got)
	}
}

type landlockTestError string

func (e landlockTestError) Error() string { return string(e) }
