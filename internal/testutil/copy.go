package testutil

import (
	"io"
	"os"
	"testing"
)

// CopyExecutable copies the executable src to a new file dst (mode 0755), for a
// test binary that must run where its own path is not visible or not reachable: as
// another user, or inside a sandbox. dst must not exist.
func CopyExecutable(t testing.TB, src, dst string) {
	t.Helper()
	if err := copyExecutable(src, dst); err != nil {
		t.Fatalf("copying %s to %s: %v", src, dst, err)
	}
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
