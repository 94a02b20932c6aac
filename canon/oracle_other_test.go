//go:build !linux

package canon

// kernelRealpath has no portable oracle; the tests fall back to their tables.
func kernelRealpath(p string) (string, bool) { return "", false }
