//go:build !linux

package fusefence

import (
	"os"

	"golang.org/x/sys/unix"
)

// openAuditFile opens (creating it 0600) the audit log at p for appending, never
// following a symlink at its last component.
func openAuditFile(p string) (*os.File, error) {
	return os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
}
