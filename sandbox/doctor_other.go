//go:build !linux

package sandbox

import (
	"context"
	"os"
	"runtime"
)

// measureHost off Linux: the only fact a rung can fail on that doctor measures is
// whether sandbox-exec exists (macOS). There is no bwrap or Landlock rung here.
func measureHost(ctx context.Context, c *Chain, opts Options) HostFacts {
	f := HostFacts{OS: runtime.GOOS, UID: os.Getuid()}
	if runtime.GOOS == "darwin" {
		_, err := os.Stat("/usr/bin/sandbox-exec")
		f.SandboxExec = err == nil
	}
	return f
}
