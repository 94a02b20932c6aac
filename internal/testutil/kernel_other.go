//go:build !linux

package testutil

// LandlockABI is 0: Landlock is Linux-only.
func LandlockABI() int { return 0 }
