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
//   - /run/user, every user's runtime directory, and the caller's $XDG_RUNTIME_DIR
//     become an empty private tmpfs, like /tmp under workspace-write. That hides the
//     session buses, the users' systemd managers, rootless podman and docker, and
//     every other per-user socket kept there (gpg-agent and keyring sockets
//     included: a command that needs to sign or to read a secret runs under
//     danger-full-access). All users', not only the caller's: a command run by root
//     may connect to any user's session bus.
//   - The X11 socket directory /tmp/.X11-unix (an X client can type into a terminal),
//     the caller's tmux, zellij and screen socket directories (/tmp/tmux-UID,
//     $TMUX_TMPDIR/tmux-UID, zellij-UID in /tmp and $TMPDIR, $ZELLIJ_SOCKET_DIR,
//     /run/screen, $SCREENDIR), its Emacs and Neovim server directories where no
//     runtime directory holds them (emacsUID and nvim.NAME in /tmp and $TMPDIR:
//     emacsclient --eval and nvim --remote-expr run code in the editor) and the
//     socket $TMUX names become empty too. Under workspace-write /tmp is a private
//     tmpfs already, and nothing inside a writable root is hidden (below): with
//     $TMPDIR a writable root of the run, as by default, its servers stay reachable.
//     A directory the environment names must be the caller's own and closed to others
//     (XDG_RUNTIME_DIR=/usr/bin hides nothing) and not a link (in a world-writable
//     $TMPDIR another user could plant one to the caller's ~/.ssh, or to a place bwrap
//     cannot mount on, failing the run), in a directory others cannot replace it in;
//     one in the host's /tmp must be root's or the caller's, the only users who can
//     remove it there (/tmp is sticky): another user could otherwise make and remove a
//     name between this look and bwrap's mount, and fail the run. So a read-only
//     command run by root still reaches other users' tmux servers in /tmp
//     (workspace-write's /tmp is private).
//   - The sockets of system services that run programs or containers on request
//     ([deputySockets]: systemd's private socket and the system bus, docker,
//     containerd, podman, cri-o, buildkit, libvirt, lxd, incus, snapd) get /dev/null
//     bound over them; connect(2) then fails with ECONNREFUSED.
//
// What is never hidden: a place that holds the working directory, the workspace
// root or a writable root (hiding it would hide them, and bwrap would quietly start
// the command in $HOME instead: [Run] passes --chdir, so a working directory that is
// not there fails the run); a place inside a writable root (a tmpfs there would
// swallow the command's writes, and a mountpoint bwrap must create there would be
// created on the host); a directory fewer than two levels deep ($XDG_RUNTIME_DIR=/).
// What exists is looked at when the argv is built; a socket that appears later (a
// service started during the run) is not hidden.
//
// Not covered: a deputy this list does not know (an editor's or an IDE's command socket
// elsewhere in the host's /tmp, which read-only runs see: VS Code's vscode-ipc-*.sock,
// an editor server started with a socket name of its own; a service listening in the
// workspace). Hiding every socket in /tmp was tried and not kept: any local user can
// make thousands there (bwrap then fails on its argument count) or remove one between
// the look and the mount (bwrap then fails to make its mountpoint), and sockets one
// level down stayed reachable anyway. Also not covered: the same socket under another
// name that is not a symlink (a bind mount of its directory, a hard link to it made
// earlier), abstract unix sockets under network allow (X11's among them: they belong to
// the network namespace, which network deny unshares), and the Landlock rung, which has
// no mount namespace to hide them in (Landlock ABI 9 can restrict connect; this kernel
// has ABI 7). The environment read is toh-exec's own (a library caller that hands [Run]
// another one gets its own process's places hidden), and only ever to hide more, never
// less.

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/internal/passwd"
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

// deputyHides lists what a bwrap run under pol, started in cwd, hides, as it exists
// now; getenv is the caller's environment.
func deputyHides(pol policy.Execution, getenv func(string) string, cwd string) []bwrapHide {
	uid := os.Getuid()
	dirs := []string{"/run/user", "/run/screen"}
	// Directories the environment names must be the caller's own and closed to
	// others, as these are: a value naming anything else (/usr/bin) hides nothing.
	for _, d := range []string{getenv("XDG_RUNTIME_DIR"), getenv("SCREENDIR"), getenv("ZELLIJ_SOCKET_DIR")} {
		if ownPrivateDir(d, uid) {
			dirs = append(dirs, d)
		}
	}
	if d := getenv("TMUX_TMPDIR"); d != "" {
		if p := filepath.Join(d, "tmux-"+strconv.Itoa(uid)); ownPrivateDir(p, uid) {
			dirs = append(dirs, p)
		}
	}
	// In the host's /tmp, only what root or the caller alone can remove (/tmp is
	// sticky): a name another user could make and remove again between this look
	// and bwrap's mount would fail the run (CI failed so while a reviewer made and
	// removed /tmp/tmux-1001 beside root's tests). X11's directory is root's; the
	// caller's tmux server's is the caller's.
	if ownedBy("/tmp/.X11-unix", 0) {
		dirs = append(dirs, "/tmp/.X11-unix")
	}
	if p := "/tmp/tmux-" + strconv.Itoa(uid); ownedBy(p, uid) {
		dirs = append(dirs, p)
	}
	// Servers' sockets where no runtime directory is set, in $TMPDIR or /tmp:
	// zellij's (zellij-UID: "zellij run -- CMD"), Emacs's server-socket-dir
	// (emacsUID: emacsclient --eval runs Lisp) and Neovim's run directory
	// (nvim.NAME with the caller's name from the password database, "/" made "_",
	// and $NVIM_APPNAME for "nvim" when set: --remote-expr runs Vimscript). $USER's
	// spelling is hidden too, should it differ. $TMPDIR's must be private too, like
	// the environment's others.
	tmpdir := getenv("TMPDIR")
	for _, name := range serverDirNames(uid, getenv) {
		if p := "/tmp/" + name; ownedBy(p, uid) {
			dirs = append(dirs, p)
		}
		if tmpdir != "" {
			if p := filepath.Join(tmpdir, name); ownPrivateDir(p, uid) {
				dirs = append(dirs, p)
			}
		}
	}
	socks := append([]string(nil), deputySockets...)
	if t, _, _ := strings.Cut(getenv("TMUX"), ","); t != "" {
		socks = append(socks, t)
	}
	// What a hidden place must not hold.
	keep := []string{cwd, pol.WorkspaceRoot}
	var roots []string
	if pol.Mode == policy.WorkspaceWrite {
		roots = pol.WritableRoots
		keep = append(keep, roots...)
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
		if dir && strings.Count(real, "/") < 2 {
			return // "/", "/run": not a deputy's own directory
		}
		for _, own := range []string{"/dev", "/proc", "/sys"} {
			if canon.LexicallyWithin(real, own) {
				return // bwrap's own mounts: nothing to hide there, nowhere to mount
			}
		}
		if pol.Mode == policy.WorkspaceWrite && canon.LexicallyWithin(real, "/tmp") {
			return // the run's /tmp is a private tmpfs already
		}
		for _, k := range keep {
			if k != "" && canon.LexicallyWithin(k, real) {
				return // hiding it would hide what the run works in
			}
		}
		for _, r := range roots {
			if canon.LexicallyWithin(real, r) {
				return // the command's own place (see the package doc above)
			}
		}
		for _, h := range out {
			if h.dir && canon.LexicallyWithin(real, h.path) {
				return // hidden with its directory
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

// serverDirNames names the server directories of uid kept in $TMPDIR or /tmp (see
// deputyHides).
func serverDirNames(uid int, getenv func(string) string) []string {
	names := []string{"zellij-" + strconv.Itoa(uid), "emacs" + strconv.Itoa(uid)}
	apps := []string{"nvim"}
	if a := getenv("NVIM_APPNAME"); a != "" && a != "nvim" && !strings.ContainsAny(a, "/\\") {
		apps = append(apps, a)
	}
	var users []string
	if e, ok := passwd.Lookup(uid); ok && e.Name != "" {
		users = append(users, strings.NewReplacer("/", "_", "\\", "_").Replace(e.Name))
	}
	if u := getenv("USER"); u != "" && !strings.ContainsAny(u, "/\\") && !slices.Contains(users, u) {
		users = append(users, u)
	}
	for _, a := range apps {
		for _, u := range users {
			if n := a + "." + u; n != "." && n != ".." {
				names = append(names, n)
			}
		}
	}
	return names
}

// ownedBy reports whether p (not followed) is a directory owned by uid.
func ownedBy(p string, uid int) bool {
	var st syscall.Stat_t
	return syscall.Lstat(p, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR && int(st.Uid) == uid
}

// ownPrivateDir reports whether p, a path the environment names, is a directory of
// uid's own that no one else may enter, and is not a link, so bwrap's mount lands on
// it and nowhere else: a link another user planted in a world-writable $TMPDIR
// (tmux-UID, emacsUID pointing at the caller's ~/.ssh, or at /proc/PID/fd, where
// bwrap cannot mount and the run would fail) would otherwise choose what is hidden.
// Its directory must keep others from replacing it (root's or uid's, and closed to
// others' writes or sticky). The components above p may be links (TMPDIR=/var/run/..),
// which [deputyHides] resolves before it mounts.
func ownPrivateDir(p string, uid int) bool {
	var st, dst syscall.Stat_t
	if !filepath.IsAbs(p) || syscall.Lstat(p, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR ||
		int(st.Uid) != uid || st.Mode&0o077 != 0 {
		return false
	}
	if syscall.Stat(filepath.Dir(filepath.Clean(p)), &dst) != nil {
		return false
	}
	return (dst.Uid == 0 || int(dst.Uid) == uid) && (dst.Mode&0o022 == 0 || dst.Mode&syscall.S_ISVTX != 0)
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
