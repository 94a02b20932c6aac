package testutil

import "golang.org/x/sys/unix"

// LandlockABI returns the kernel's Landlock ABI version, 0 when unavailable.
func LandlockABI() int {
	const createRulesetVersion = 1 << 0
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, createRulesetVersion)
	if errno != 0 {
		return 0
	}
	return int(v)
}
