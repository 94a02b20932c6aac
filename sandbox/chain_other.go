//go:build !linux && !darwin

package sandbox

// platformProviders is empty: on other systems every confined call fails closed
// without probing.
func platformProviders(opts Options) []Provider { return nil }
