//go:build !linux

package sandbox

import "github.com/toh-sandbox/toh/policy"

// accessState is unused off Linux: only the bwrap rung needs it (access_linux.go).
type accessState struct{}

func ancestorsOfProtected(policy.Execution, []string) []accessState { return nil }

func restoreAccess([]accessState) []string { return nil }
