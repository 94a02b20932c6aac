package policy

import (
	"fmt"
	"unicode"
)

// Escalation error codes, returned by [EscalationError.Code].
const (
	// CodeInvalidEscalation: sandbox_permissions and justification are not a valid
	// pair (one without the other, or an unknown mode).
	CodeInvalidEscalation = "INVALID_ESCALATION"
	// CodeInvalidJustification: the justification has no sentence in it.
	CodeInvalidJustification = "INVALID_JUSTIFICATION"
	// CodeNotWider: the requested mode is not strictly wider than the effective one.
	CodeNotWider = "NOT_WIDER"
)

// EscalationError is a refused escalation request. Error() is the exact SPEC §6 text,
// which harnesses and models key on; Code() is for callers that branch.
type EscalationError struct {
	code string
	text string
}

func (e *EscalationError) Error() string { return e.text }

// Code returns one of CodeInvalidEscalation, CodeInvalidJustification, CodeNotWider.
func (e *EscalationError) Code() string { return e.code }

// Exact texts of SPEC §6.
const (
	textNeedsJustification   = "invalid escalation: sandbox_permissions requires a justification"
	textJustificationAlone   = "invalid escalation: justification is only valid together with sandbox_permissions"
	textEmptyJustification   = "invalid justification: expected a non-empty sentence"
	textNotWiderFmt          = `sandbox escalation to "%s" is not strictly wider than this call's current "%s" mode`
	textRejectedFmt          = `the user rejected escalating this %s to "%s"`
	textCancelledFmt         = `approval for escalating to "%s" was cancelled`
	textUnavailableApproval  = `sandbox escalation to "%s" requires approval, but no approval channel is available`
	textUnknownRequestedMode = "invalid escalation: sandbox_permissions: %v"
)

func rank(m Mode) int {
	switch m {
	case ReadOnly:
		return 0
	case WorkspaceWrite:
		return 1
	case DangerFullAccess:
		return 2
	}
	return -1
}

// IsStrictlyWider reports whether to is a rung above from on the ladder read-only <
// workspace-write < danger-full-access. Unknown modes are never wider nor widened.
func IsStrictlyWider(from, to Mode) bool {
	rf, rt := rank(from), rank(to)
	return rf >= 0 && rt >= 0 && rt > rf
}

// ValidateEscalation checks one call's escalation request before anything runs or any
// prompt is shown. requested is the call's sandbox_permissions ("" when absent);
// effective is the mode the call would run under without escalation. It returns nil
// when there is no request at all or the request may go to the approver, and otherwise
// an [*EscalationError], checked in this order:
//
//  1. requested without justification (justification == ""): INVALID_ESCALATION;
//  2. justification without requested: INVALID_ESCALATION;
//  3. a justification that is not a sentence: INVALID_JUSTIFICATION. A justification
//     counts as empty unless it contains at least one Unicode letter or digit, so white
//     space, punctuation, control and zero-width characters (U+200B is not white space
//     to strings.TrimSpace) alone are all empty;
//  4. requested not one of the three modes: INVALID_ESCALATION (no SPEC text exists;
//     the text names the bad value);
//  5. requested not strictly wider than effective: NOT_WIDER.
//
// An effective mode outside the vocabulary is a caller bug; it fails step 5 because
// nothing is wider than an unknown mode.
func ValidateEscalation(requested Mode, justification string, effective Mode) error {
	switch {
	case requested == "" && justification == "":
		return nil
	case justification == "":
		return &EscalationError{CodeInvalidEscalation, textNeedsJustification}
	case requested == "":
		return &EscalationError{CodeInvalidEscalation, textJustificationAlone}
	case !isSentence(justification):
		return &EscalationError{CodeInvalidJustification, textEmptyJustification}
	}
	if _, err := ParseMode(string(requested)); err != nil {
		return &EscalationError{CodeInvalidEscalation, fmt.Sprintf(textUnknownRequestedMode, err)}
	}
	if !IsStrictlyWider(effective, requested) {
		return &EscalationError{CodeNotWider, notWiderText(requested, effective)}
	}
	return nil
}

func isSentence(s string) bool {
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsNumber(r) {
			return true
		}
	}
	return false
}

func notWiderText(requested, effective Mode) string {
	return fmt.Sprintf(textNotWiderFmt, requested, effective)
}

// RejectedText is the outcome text when the user rejects an escalation; subject is
// "command" (toh-exec) or "operation" (the fence).
func RejectedText(subject string, m Mode) string { return fmt.Sprintf(textRejectedFmt, subject, m) }

// CancelledText is the outcome text when the approval prompt is cancelled.
func CancelledText(m Mode) string { return fmt.Sprintf(textCancelledFmt, m) }

// UnavailableApprovalText is the outcome text when an escalation needs approval but no
// approval channel exists.
func UnavailableApprovalText(m Mode) string { return fmt.Sprintf(textUnavailableApproval, m) }
