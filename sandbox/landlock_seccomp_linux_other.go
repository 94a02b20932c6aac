//go:build linux && !amd64 && !arm64

package sandbox

// No seccomp filter on this architecture: read-only runs are partial (metadata is
// ungoverned) and network deny fails closed.
var landlockSeccompArch seccompArch
