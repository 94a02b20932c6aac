//go:build !linux

package sandbox

// accessState is unused off Linux: only the bwrap rung needs it (access_linux.go).
type accessState struct{}

func ancestorsOfProtected([]bwrapGuard) []accessState { return nil }

func restoreAccess([]accessState) []string { return nil }
