package policy

// Exact texts shared by the shell family (toh-exec) and the file family (the fence).
// They are copied byte for byte from SPEC §4.4; a test finds each one in SPEC.md.
//
// Modes and paths are interpolated verbatim, between plain double quotes where the SPEC
// shows quotes: a path that itself contains `"` or a newline is printed as is, not
// escaped, because consumers match these texts literally and the SPEC shows no escaping.

// DenialMarker is printed on stderr after a run that was denied a file effect.
func DenialMarker(m Mode) string {
	return "[sandbox: file access denied under " + string(m) + " mode]"
}

// EscalationHint follows the denial marker when escalation is possible; subject is
// "command" for toh-exec and "operation" for the fence. The dash is U+2014.
func EscalationHint(subject string) string {
	return "[sandbox: escalation available \u2014 retry this exact " + subject +
		" once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]"
}

// DeniedText is the file-family denial (error code FS_SANDBOX_DENIED).
func DeniedText(path string, m Mode) string {
	return `cannot write "` + path + `": file access denied under ` + string(m) + " mode"
}
