package policy

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// TestTextsMatchSpec finds every exact text of this package, rendered with the SPEC's
// own placeholders, between backticks in SPEC.md, so a drift on either side fails.
func TestTextsMatchSpec(t *testing.T) {
	const specPath = "../../shared/SPEC.md"
	raw, err := os.ReadFile(specPath)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s is not present in this checkout; the exact texts are still pinned by the other tests", specPath)
	}
	if err != nil {
		t.Fatal(err)
	}
	spec := string(raw)
	const mode, eff, subject, path = Mode("<mode>"), Mode("<effective>"), "<subject>", "<path>"
	texts := map[string]string{
		"DenialMarker":            DenialMarker(mode),
		"EscalationHint":          EscalationHint(subject),
		"DeniedText":              DeniedText(path, mode),
		"RejectedText":            RejectedText(subject, mode),
		"CancelledText":           CancelledText(mode),
		"UnavailableApprovalText": UnavailableApprovalText(mode),
		"notWiderText":            notWiderText(mode, eff),
		"textNeedsJustification":  textNeedsJustification,
		"textJustificationAlone":  textJustificationAlone,
		"textEmptyJustification":  textEmptyJustification,
	}
	for name, text := range texts {
		if needle := "`" + text + "`"; !strings.Contains(spec, needle) {
			t.Errorf("%s: %s not found in %s", name, needle, specPath)
		}
	}
	// DefaultProtect is the list of the SPEC's example document.
	if needle := `"protect": ["` + strings.Join(DefaultProtect, `", "`) + `"]`; !strings.Contains(spec, needle) {
		t.Errorf("DefaultProtect: %s not found in %s", needle, specPath)
	}
	if !strings.Contains(EscalationHint("x"), "\u2014") {
		t.Errorf("EscalationHint lost its em dash")
	}
}

func TestTextsConcrete(t *testing.T) {
	checks := []struct{ got, want string }{
		{DenialMarker(ReadOnly), "[sandbox: file access denied under read-only mode]"},
		{DeniedText("/etc/passwd", WorkspaceWrite), `cannot write "/etc/passwd": file access denied under workspace-write mode`},
		{DeniedText(`/tmp/a"b`, ReadOnly), `cannot write "/tmp/a"b": file access denied under read-only mode`},
		{EscalationHint("command"), "[sandbox: escalation available \u2014 retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("got  %s\nwant %s", c.got, c.want)
		}
	}
}
