package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/toh-sandbox/toh/policy"
)

const wantUnavailableWorkspaceWrite = `sandbox mode "workspace-write" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing kernel (Linux), ensure sandbox-exec is usable (macOS), or ensure the ACL restricted-token runner can start (Windows) — otherwise switch the consumer to danger-full-access.`

func TestUnavailableError(t *testing.T) {
	cause := errors.New("probe: bwrap: setting up uid map: Permission denied")
	e := &UnavailableError{Mode: policy.WorkspaceWrite, Cause: cause}
	if got := e.Error(); got != wantUnavailableWorkspaceWrite {
		t.Errorf("Error() =\n%s\nwant\n%s", got, wantUnavailableWorkspaceWrite)
	}
	if strings.Contains(e.Error(), cause.Error()) {
		t.Error("Error() must not print the internal cause")
	}
	if e.Code() != "SANDBOX_UNAVAILABLE" {
		t.Errorf("Code() = %q", e.Code())
	}
	if !errors.Is(e, cause) {
		t.Error("errors.Is does not reach Cause")
	}
	var target *UnavailableError
	if err := error(e); !errors.As(err, &target) || target != e {
		t.Error("errors.As does not find *UnavailableError")
	}

	e.RunnerFailure = "bwrap: Can't mkdir /w: Read-only file system"
	if got, want := e.Error(), wantUnavailableWorkspaceWrite+" Runner failure: bwrap: Can't mkdir /w: Read-only file system"; got != want {
		t.Errorf("Error() with runner failure =\n%s\nwant\n%s", got, want)
	}

	ro := &UnavailableError{Mode: policy.ReadOnly}
	if got := ro.Error(); !strings.HasPrefix(got, `sandbox mode "read-only" is requested`) {
		t.Errorf("read-only Error() = %s", got)
	}
	if (&UnavailableError{Mode: policy.ReadOnly}).Unwrap() != nil {
		t.Error("Unwrap without a cause must be nil")
	}
}

// The detail is a stderr line the confined command may have written: it must not be
// able to carry terminal control sequences or break the error into several lines.
func TestUnavailableErrorNeutralisesControlCharacters(t *testing.T) {
	e := &UnavailableError{Mode: policy.ReadOnly, RunnerFailure: "bwrap: x\x1b[2J\rspoof\x00\u0085end\ttab"}
	got := e.Error()
	suffix := " Runner failure: bwrap: x\uFFFD[2J\uFFFDspoof\uFFFD\uFFFDend\ttab"
	if !strings.HasSuffix(got, suffix) {
		t.Errorf("Error() = %q, want suffix %q", got, suffix)
	}
}

func TestUnavailableRunnerFailureNotice(t *testing.T) {
	want := "[sandbox: the sandbox runner itself failed under workspace-write mode — the command did not run; this is a sandbox problem, not a command failure]"
	if got := RunnerFailureNotice(policy.WorkspaceWrite); got != want {
		t.Errorf("RunnerFailureNotice = %s, want %s", got, want)
	}
}

// TestSpecExactTexts checks every exact text this package produces against SPEC.md
// itself, with the placeholders substituted, so the two cannot drift apart.
func TestSpecExactTexts(t *testing.T) {
	b, err := os.ReadFile("../../shared/SPEC.md")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("../../shared/SPEC.md is absent (the spec lives outside this module); cannot compare exact texts")
	}
	if err != nil {
		t.Fatal(err)
	}
	spec := string(b)

	// Each text must appear as a whole backticked span.
	texts := map[string]string{
		"unavailable":         (&UnavailableError{Mode: "<mode>"}).Error(),
		"runner failure tail": strings.TrimPrefix((&UnavailableError{Mode: "<mode>", RunnerFailure: "<detail>"}).Error(), (&UnavailableError{Mode: "<mode>"}).Error()),
		"runner notice":       RunnerFailureNotice("<mode>"),
		// --unshare-ipc, the read-only /proc/sys and /proc/sysrq-trigger and
		// --cap-drop ALL are documented additions to the SPEC profile (see BwrapArgv).
		"bwrap read-only": strings.NewReplacer(" --unshare-ipc", "",
			" --ro-bind /proc/sys /proc/sys --ro-bind-try /proc/sysrq-trigger /proc/sysrq-trigger", "",
			" --cap-drop ALL", "").Replace("bwrap " + strings.Join(BwrapArgv(policy.Execution{Mode: policy.ReadOnly}, []string{"<argv…>"}), " ")),
		"seatbelt read-only": SeatbeltProfile(policy.Execution{Mode: policy.ReadOnly}),
		"bwrap dialect":      specDenial(BwrapDialect()),
		"landlock dialect":   specDenial(LandlockDialect()),
		"seatbelt dialect":   specDenial(SeatbeltDialect()),
		"bwrap marker":       specRules(BwrapDialect()).Marker,
		"landlock marker":    specRules(LandlockDialect()).Marker,
		"seatbelt marker":    specRules(SeatbeltDialect()).Marker,
		"landlock notice":    specRules(LandlockDialect()).Except[0],
		"code":               (&UnavailableError{}).Code(),
	}
	for name, text := range texts {
		if !strings.Contains(spec, "`"+text+"`") {
			t.Errorf("%s: `%s` does not appear verbatim in SPEC.md", name, text)
		}
	}

	// The workspace-write Seatbelt form is spelled with an ellipsis in the spec; check
	// our form for one root against its fixed part.
	ws := SeatbeltProfile(policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: []string{"<root>"}})
	add := strings.TrimPrefix(ws, texts["seatbelt read-only"])
	if !strings.HasPrefix(add, " (allow file-write* (subpath \"<root>\")") ||
		!strings.Contains(spec, "` (allow file-write* (subpath \"<root>\") …)`") {
		t.Errorf("workspace-write Seatbelt addition %q does not follow SPEC's ` (allow file-write* (subpath \"<root>\") …)`", add)
	}
	argv := SeatbeltArgv(policy.Execution{Mode: policy.ReadOnly}, []string{"<argv…>"})
	if got := "sandbox-exec " + argv[0] + " '<profile>' " + strings.Join(argv[2:], " "); !strings.Contains(spec, "`"+got+"`") {
		t.Errorf("Seatbelt argv shape %q does not appear in SPEC.md", got)
	}
}

func specDenial(d []string, _ RunnerFailureRules) string            { return d[0] }
func specRules(_ []string, r RunnerFailureRules) RunnerFailureRules { return r }
