package policy

import (
	"fmt"
	"strings"
)

// Modes, Networks and Approvals list each closed vocabulary in ladder / display order.
var (
	Modes     = []Mode{ReadOnly, WorkspaceWrite, DangerFullAccess}
	Networks  = []Network{NetworkAllow, NetworkDeny}
	Approvals = []Approval{ApprovalAsk, ApprovalNever}
)

// EnumError reports a value outside one of the closed vocabularies. Kind is "mode",
// "network" or "approval"; in the file each kind is held by exactly one key per object,
// and that key is named like the kind, which is how [Parse] names the field.
type EnumError struct {
	Kind    string
	Value   string
	Allowed []string
}

func (e *EnumError) Error() string {
	return fmt.Sprintf("unknown %s %q (want %s)", e.Kind, e.Value, joinOr(e.Allowed))
}

// joinOr renders "a", "a or b", "a, b or c".
func joinOr(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

func parseEnum[T ~string](kind, s string, vocab []T) (T, error) {
	for _, v := range vocab {
		if string(v) == s {
			return v, nil
		}
	}
	allowed := make([]string, len(vocab))
	for i, v := range vocab {
		allowed[i] = string(v)
	}
	return "", &EnumError{Kind: kind, Value: s, Allowed: allowed}
}

// ParseMode returns the mode named s. The empty string and every spelling other than
// the three exact mode names are errors (an [*EnumError]), never a default.
func ParseMode(s string) (Mode, error) { return parseEnum("mode", s, Modes) }

// ParseNetwork returns the network switch named s ("allow" or "deny").
func ParseNetwork(s string) (Network, error) { return parseEnum("network", s, Networks) }

// ParseApproval returns the approval setting named s ("ask" or "never").
func ParseApproval(s string) (Approval, error) { return parseEnum("approval", s, Approvals) }

// Valid reports whether m is one of the three modes.
func (m Mode) Valid() bool { _, err := ParseMode(string(m)); return err == nil }

// Valid reports whether n is "allow" or "deny".
func (n Network) Valid() bool { _, err := ParseNetwork(string(n)); return err == nil }

// Valid reports whether a is "ask" or "never".
func (a Approval) Valid() bool { _, err := ParseApproval(string(a)); return err == nil }

// UnmarshalText implements [encoding.TextUnmarshaler] with [ParseMode]'s validation, so
// decoding any JSON that holds a Mode (the file, an [Execution]) rejects unknown modes.
func (m *Mode) UnmarshalText(text []byte) error {
	v, err := ParseMode(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// UnmarshalText implements [encoding.TextUnmarshaler] with [ParseNetwork]'s validation.
func (n *Network) UnmarshalText(text []byte) error {
	v, err := ParseNetwork(string(text))
	if err != nil {
		return err
	}
	*n = v
	return nil
}

// UnmarshalText implements [encoding.TextUnmarshaler] with [ParseApproval]'s validation.
func (a *Approval) UnmarshalText(text []byte) error {
	v, err := ParseApproval(string(text))
	if err != nil {
		return err
	}
	*a = v
	return nil
}
