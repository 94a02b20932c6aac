package policy

import (
	"errors"
	"testing"
)

func TestIsStrictlyWider(t *testing.T) {
	wider := map[[2]Mode]bool{
		{ReadOnly, WorkspaceWrite}:         true,
		{ReadOnly, DangerFullAccess}:       true,
		{WorkspaceWrite, DangerFullAccess}: true,
	}
	all := append(append([]Mode{}, Modes...), "", "rw")
	for _, from := range all {
		for _, to := range all {
			if got := IsStrictlyWider(from, to); got != wider[[2]Mode{from, to}] {
				t.Errorf("IsStrictlyWider(%q, %q) = %v", from, to, got)
			}
		}
	}
}

func TestValidateEscalation(t *testing.T) {
	tests := []struct {
		name          string
		requested     Mode
		justification string
		effective     Mode
		code, text    string
	}{
		{"no request", "", "", ReadOnly, "", ""},
		{"valid", WorkspaceWrite, "need to write the build output", ReadOnly, "", ""},
		{"valid two rungs", DangerFullAccess, "install a package", ReadOnly, "", ""},
		{"valid non-latin", WorkspaceWrite, "ビルド", ReadOnly, "", ""},
		{"valid digits only", WorkspaceWrite, "42", ReadOnly, "", ""},
		{"no justification", WorkspaceWrite, "", ReadOnly, CodeInvalidEscalation, "invalid escalation: sandbox_permissions requires a justification"},
		{"no justification, also not wider", ReadOnly, "", ReadOnly, CodeInvalidEscalation, "invalid escalation: sandbox_permissions requires a justification"},
		{"justification alone", "", "because", ReadOnly, CodeInvalidEscalation, "invalid escalation: justification is only valid together with sandbox_permissions"},
		{"blank justification alone", "", "   ", ReadOnly, CodeInvalidEscalation, "invalid escalation: justification is only valid together with sandbox_permissions"},
		{"whitespace justification", WorkspaceWrite, " \t\n", ReadOnly, CodeInvalidJustification, "invalid justification: expected a non-empty sentence"},
		{"zero-width justification", WorkspaceWrite, "\u200b\u200b", ReadOnly, CodeInvalidJustification, "invalid justification: expected a non-empty sentence"},
		{"punctuation justification", WorkspaceWrite, "...", ReadOnly, CodeInvalidJustification, "invalid justification: expected a non-empty sentence"},
		{"nbsp justification", WorkspaceWrite, "\u00a0", ReadOnly, CodeInvalidJustification, "invalid justification: expected a non-empty sentence"},
		{"blank beats not-wider", ReadOnly, " ", DangerFullAccess, CodeInvalidJustification, "invalid justification: expected a non-empty sentence"},
		{"unknown mode", "rw", "please", ReadOnly, CodeInvalidEscalation, `invalid escalation: sandbox_permissions: unknown mode "rw" (want read-only, workspace-write or danger-full-access)`},
		{"same mode", WorkspaceWrite, "please", WorkspaceWrite, CodeNotWider, `sandbox escalation to "workspace-write" is not strictly wider than this call's current "workspace-write" mode`},
		{"narrower", ReadOnly, "please", DangerFullAccess, CodeNotWider, `sandbox escalation to "read-only" is not strictly wider than this call's current "danger-full-access" mode`},
		{"from full access", DangerFullAccess, "please", DangerFullAccess, CodeNotWider, `sandbox escalation to "danger-full-access" is not strictly wider than this call's current "danger-full-access" mode`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateEscalation(tt.requested, tt.justification, tt.effective)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("ValidateEscalation = %v, want nil", err)
				}
				return
			}
			var ee *EscalationError
			if !errors.As(err, &ee) {
				t.Fatalf("ValidateEscalation = %v (%T), want *EscalationError", err, err)
			}
			if ee.Code() != tt.code || ee.Error() != tt.text {
				t.Errorf("ValidateEscalation =\n  %s: %s\nwant\n  %s: %s", ee.Code(), ee.Error(), tt.code, tt.text)
			}
		})
	}
}

func TestOutcomeTexts(t *testing.T) {
	checks := []struct{ got, want string }{
		{RejectedText("command", WorkspaceWrite), `the user rejected escalating this command to "workspace-write"`},
		{RejectedText("operation", DangerFullAccess), `the user rejected escalating this operation to "danger-full-access"`},
		{CancelledText(WorkspaceWrite), `approval for escalating to "workspace-write" was cancelled`},
		{UnavailableApprovalText(DangerFullAccess), `sandbox escalation to "danger-full-access" requires approval, but no approval channel is available`},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("got  %s\nwant %s", c.got, c.want)
		}
	}
}
