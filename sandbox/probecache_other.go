//go:build !linux

package sandbox

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// cacheKey describes everything the verdict depends on (see [ProbeCache]). Off Linux
// the chain has at most one candidate, which is never probed, so this is a fallback.
func cacheKey(files []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "euid=%d;", os.Geteuid())
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(&b, "%s=missing;", f)
			continue
		}
		fmt.Fprintf(&b, "%s=%d:%d;", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}

func readCacheFile(path string) ([]byte, error) { return os.ReadFile(path) }

// openCacheDir opens the cache's directory; off Linux (no openat2) only its last
// component is kept from being a link.
func openCacheDir(dir string) (int, error) {
	return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
}
