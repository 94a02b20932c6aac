//go:build !linux

package sandbox

import (
	"fmt"
	"os"
	"strings"
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
