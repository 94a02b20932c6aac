//go:build !linux && !darwin

package approval

// flushInput does nothing where toh has no terminal code of its own.
func flushInput(int) {}
