package sandbox

// Deputies: services outside the sandbox that run programs on request.
//
// Neither rung governs connect(2) to a pathname unix socket on kernels below
// Landlock ABI 9, and a socket can be connected through a read-only mount (the
// kernel asks for write permission on the socket's inode, which a read-only bind
// does not take away). A service listening on one that starts what it is asked to
// makes its file effects unconfined, under any mode: "systemd-run --user sh -c ..."
// through the user's bus, systemctl through systemd's private socket for a command
// run by root, a container with the host's / bind-mounted through docker.sock,
// "tmux new-window CMD" through the user's tmux server.
//
// Decision: the bwrap rung hides the deputies it knows of, in every confined mode.
//
//   - The caller's runtime directories (/run/user/UID, and $XDG_RUNTIME_DIR) become an
//     empty private tmpfs, like /tmp under workspace-write. That hides the session
//     bus, the user's systemd manager, rootless podman and docker, and every other
//     per-user socket kept there (gpg-agent and keyring sockets included: a command
//     that needs to sign or to read a secret runs under danger-full-access).
//   - The tmux and screen socket directories (/tmp/tmux-UID, $TMUX_TMPDIR/tmux-UID,
//     the socket named in $TMUX, /run/screen, $SCREENDIR) become empty too. Under
//     workspace-write /tmp is a private tmpfs already.
//   - The sockets of system services that run programs or containers on request
//     ([deputySockets]: systemd's private socket and the system bus, docker,
//     containerd, podman, cri-o, buildkit, libvirt, lxd, incus, snapd) get /dev/null
//     bound over them; connect(2) then fails with ECONNREFUSED.
//
// A hiding place that is a writable root, or holds one, is left alone: hiding it
// would hide the root. What exists is looked at when the argv is built; a socket
// that appears later (a service started during the run) is not hidden.
//
// Not covered: a deputy this list does not know (an editor's or an IDE's command
// socket elsewhere, a service listening in the workspace), abstract unix sockets
// under network allow (they belong to the network namespace, which network deny
// unshares), and the Landlock rung, which has no mount namespace to hide them in
// (Landlock ABI 9 can restrict connect; this kernel has ABI 7). The environment is
// read only to hide more, never less.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

// deputySockets are the system services' sockets that bwrap runs hide. A variable
// so that tests can point it at sockets of their own.
var deputySockets = []string{
	"/run/systemd/private",
	"/run/dbus/system_bus_socket",
	"/run/docker.sock",
	"/var/run/docker.sock",
	"/run/containerd/containerd.sock",
	"/run/podman/podman.sock",
	"/run/crio/crio.sock",
	"/run/buildkit/buildkitd.sock",
	"/run/libvirt/libvirt-sock",
	"/var/snap/lxd/common/lxd/unix.socket",
	"/var/lib/lxd/unix.socket",
	"/var/lib/incus/unix.socket",
	"/run/snapd.socket",
	"/run/snapd-snap.socket",
}

// bwrapHide is one place a bwrap run hides: an empty tmpfs over a directory, or
// /dev/null over a socket.
type bwrapHide struct {
	path string
	dir  bool
}

// deputyHides lists what a bwrap run under pol hides, as it exists now; getenv is
// the caller's environment.
func deputyHides(pol policy.Execution, getenv func(string) string) []bwrapHide {
	uid := strconv.Itoa(os.Getuid())
	var dirs []string
	dirs = append(dirs, "/run/user/"+uid, getenv("XDG_RUNTIME_DIR"), "/tmp/tmux-"+uid, "/run/screen", getenv("SCREENDIR"))
	if d := getenv("TMUX_TMPDIR"); d != "" {
		dirs = append(dirs, filepath.Join(d, "tmux-"+uid))
	}
	socks := append([]string(nil), deputySockets...)
	if t, _, _ := strings.Cut(getenv("TMUX"), ","); t != "" {
		socks = append(socks, t)
	}

	var out []bwrapHide
	seen := map[string]bool{}
	add := func(p string, dir bool) {
		if p == "" || !filepath.IsAbs(p) {
			return
		}
		// One stat for the common case, a place that does not exist here.
		var st syscall.Stat_t
		if syscall.Stat(p, &st) != nil {
			return
		}
		switch {
		case dir && st.Mode&syscall.S_IFMT != syscall.S_IFDIR:
			return
		case !dir && st.Mode&syscall.S_IFMT != syscall.S_IFSOCK:
			return
		}
		// The place itself, wherever its spelling leads: bwrap mounts on the
		// target.
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			return
		}
		if pol.Mode == policy.WorkspaceWrite {
			if canon.LexicallyWithin(real, "/tmp") {
				return // the run's /tmp is a private tmpfs already
			}
			for _, r := range pol.WritableRoots {
				if canon.LexicallyWithin(r, real) {
					return // hiding it would hide the root
				}
			}
		}
		seen[real] = true
		out = append(out, bwrapHide{path: real, dir: dir})
	}
	for _, d := range dirs {
		add(d, true)
	}
	for _, s := range socks {
		add(s, false)
	}
	return out
}

// bwrapHideOptions renders hides as bwrap options.
func bwrapHideOptions(hides []bwrapHide) []string {
	var out []string
	for _, h := range hides {
		if h.dir {
			out = append(out, "--tmpfs", h.path)
		} else {
			out = append(out, "--ro-bind", "/dev/null", h.path)
		}
	}
	return out
}
