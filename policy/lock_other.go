//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package policy

import "os"

func lockExclusive(*os.File) error { return ErrLockUnsupported }
