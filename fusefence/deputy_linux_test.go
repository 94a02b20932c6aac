package fusefence

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/posixacl"
	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// TestConfusedDeputy: as root the daemon opens and changes files for callers the
// kernel checked against the node's cached attributes (default_permissions). A
// name whose host object changed within the cache timeout, here a symlink retargeted
// on the host from a file the caller may use to one it may not, must not be read,
// written, chmodded, hard-linked or have its xattrs read in the caller's name. Each
// step has its positive control (the same call before the retarget succeeds) and
// its negative one (the root-only file is unchanged and unread). These links lead
// out of SOURCE, so on a shared mount the kernel never caches their names and
// checks the caller against what they lead to now (see TestConfusedDeputyLinkOut);
// TestConfusedDeputyReplaced covers the identity checks (ESTALE) behind this for
// names the kernel does cache.
func TestConfusedDeputy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the daemon is a deputy only as root (allow_other, default_permissions)")
	}
	e := newEnv(t, policy.WorkspaceWrite,
		"file outside/public public", "file outside/secret secret",
		"file extra/open open", "file extra/rootfile rootfile", "file extra/mine mine", "file extra/mine2 mine2", "dir src/nb",
		"file outside/xpub xpub", "file outside/xsec xsec")
	for path, mode := range map[string]os.FileMode{
		e.base: 0o755, e.outside + "/public": 0o644, e.outside + "/secret": 0o600,
		e.extra + "/open": 0o666, e.extra + "/rootfile": 0o644,
		e.outside + "/xpub": 0o644, e.outside + "/xsec": 0o600,
	} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{e.extra + "/mine", e.extra + "/mine2", e.s("nb")} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	as := asNobody
	retarget := func(name, to string) {
		t.Helper()
		tmp := e.s(name + ".new")
		if err := os.Symlink(to, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, e.s(name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, to := range map[string]string{"r": e.outside + "/public", "w": e.extra + "/open", "c": e.extra + "/mine", "l0": e.extra + "/mine2", "l": e.extra + "/mine2", "x": e.outside + "/xpub"} {
		if err := os.Symlink(to, e.s(name)); err != nil {
			t.Fatal(err)
		}
	}

	// Read.
	if out, err := as("cat", e.m("r")); err != nil || out != "public" {
		t.Fatalf("control: nobody reads r -> public: %q, %v", out, err)
	}
	retarget("r", e.outside+"/secret")
	if out, err := as("cat", e.m("r")); err == nil || strings.Contains(out, "secret") {
		t.Errorf("nobody read r after it was retargeted to a root-only file: %q, %v", out, err)
	}
	if b, err := os.ReadFile(e.m("r")); err != nil || string(b) != "secret" {
		t.Errorf("control: root reads r -> secret: %q, %v", b, err)
	}

	// Write.
	if out, err := as("sh", "-c", "printf x >> "+e.m("w")); err != nil {
		t.Fatalf("control: nobody appends to w -> open: %q, %v", out, err)
	}
	retarget("w", e.extra+"/rootfile")
	if out, err := as("sh", "-c", "printf x >> "+e.m("w")); err == nil {
		t.Errorf("nobody appended to w after it was retargeted to root's file: %q", out)
	}
	if b, _ := os.ReadFile(e.extra + "/rootfile"); string(b) != "rootfile" {
		t.Errorf("root's file changed: %q", b)
	}

	// Chmod.
	if out, err := as("chmod", "600", e.m("c")); err != nil {
		t.Fatalf("control: nobody chmods c -> its own file: %q, %v", out, err)
	}
	retarget("c", e.extra+"/rootfile")
	if out, err := as("chmod", "666", e.m("c")); err == nil {
		t.Errorf("nobody chmodded c after it was retargeted to root's file: %q", out)
	}
	if fi, _ := os.Stat(e.extra + "/rootfile"); fi.Mode().Perm() != 0o644 {
		t.Errorf("root's file's mode changed: %v", fi.Mode())
	}

	// Hard link (protected_hardlinks: nobody may link only what it owns, or may
	// read and write). l0 and l lead to the same file, so they are one node; the
	// control links through l0, and the node's name stays l for the attempt.
	if out, err := as("ln", e.m("l0"), e.m("nb/hard1")); err != nil {
		t.Fatalf("control: nobody links l0 -> its own file: %q, %v", out, err)
	}
	if os.Remove(e.s("nb/hard1")) != nil || os.Remove(e.s("l0")) != nil {
		t.Fatal("removing the control's names")
	}
	if out, err := as("stat", e.m("l")); err != nil {
		t.Fatalf("stat l: %q, %v", out, err)
	}
	retarget("l", e.extra+"/rootfile")
	if out, err := as("ln", e.m("l"), e.m("nb/hard2")); err == nil {
		t.Errorf("nobody hard-linked l after it was retargeted to root's file: %q", out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(e.extra+"/rootfile", &st); err != nil || st.Nlink != 1 {
		t.Errorf("root's file has %d links (%v), want 1", st.Nlink, err)
	}

	// Xattr read (user.* needs read permission on the file).
	for name, v := range map[string]string{"xpub": "pub-value", "xsec": "sec-value"} {
		if err := unix.Setxattr(e.outside+"/"+name, "user.k", []byte(v), 0); err != nil {
			t.Skipf("no user xattrs on %s: %v", e.outside, err)
		}
	}
	if out, err := as("getfattr", "--absolute-names", "--only-values", "-n", "user.k", e.m("x")); err != nil || out != "pub-value" {
		t.Fatalf("control: nobody reads user.k of x -> xpub: %q, %v", out, err)
	}
	retarget("x", e.outside+"/xsec")
	if out, err := as("getfattr", "--absolute-names", "--only-values", "-n", "user.k", e.m("x")); err == nil || strings.Contains(out, "sec-value") {
		t.Errorf("nobody read user.k of x after it was retargeted to a root-only file: %q, %v", out, err)
	}
}

// TestConfusedDeputyNames: the kernel checks a caller's right to add or remove a
// name against the cached attributes of the directory and, in a sticky directory,
// of the victim. A directory replaced on the host within the cache timeout (another
// moved in at its name) must not receive new names from a caller who may not write
// it, and a file replaced in a sticky directory must not be removed or renamed, or
// renamed over, by a caller who does not own it, and a create through a link the
// mirror does not show must not land in a directory the caller may not write.
// Each case has its positive control (the same call before the swap succeeds; root
// through the hidden link) and its negative one (the host is as it was).
func TestConfusedDeputyNames(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the daemon is a deputy only as root (allow_other, default_permissions)")
	}
	ops := []struct {
		name string
		cmd  func(dir string) []string
	}{
		{"create", func(dir string) []string { return []string{"touch", dir + "/new"} }},
		{"mkdir", func(dir string) []string { return []string{"mkdir", dir + "/new"} }},
		{"symlink", func(dir string) []string { return []string{"ln", "-s", "x", dir + "/new"} }},
		{"mknod", func(dir string) []string { return []string{"mkfifo", dir + "/new"} }},
		{"rename", func(dir string) []string { return []string{"mv", filepath.Dir(dir) + "/nb/rename", dir + "/new"} }},
		{"link", func(dir string) []string { return []string{"ln", filepath.Dir(dir) + "/nb/link", dir + "/new"} }},
	}
	tree := []string{"dir src/tmp", "dir src/rootdir", "file src/nb/rename mine", "file src/nb/link mine"}
	for _, op := range ops {
		tree = append(tree, "dir src/pub-"+op.name, "dir src/priv-"+op.name)
	}
	e := newEnv(t, policy.WorkspaceWrite, tree...)
	if err := os.Chmod(e.base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.s("tmp"), os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	chown := []string{e.s("nb"), e.s("nb/rename"), e.s("nb/link")}
	for _, op := range ops {
		chown = append(chown, e.s("pub-"+op.name))
	}
	for _, p := range chown {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	as := asNobody

	// New names in a directory replaced on the host: pub-OP (nobody's) is renamed
	// away and priv-OP (root's, 0755) moved in at its name.
	for _, op := range ops {
		pub := e.m("pub-" + op.name)
		// The control's changes drop the directory's cached attributes; the stat
		// caches them again, as the kernel then checks the caller against them.
		if out, err := as("sh", "-c", "touch "+pub+"/control && rm "+pub+"/control && stat "+pub); err != nil {
			t.Fatalf("%s control: nobody adds a name in its own directory: %q, %v", op.name, out, err)
		}
		if err := os.Rename(e.s("pub-"+op.name), e.s("old-"+op.name)); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(e.s("priv-"+op.name), e.s("pub-"+op.name)); err != nil {
			t.Fatal(err)
		}
		if out, err := as(op.cmd(pub)...); err == nil {
			t.Errorf("%s: nobody added a name in root's directory moved in at its own's name: %q", op.name, out)
		}
		if _, err := os.Lstat(e.s("pub-" + op.name + "/new")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: root's directory has a new entry (%v)", op.name, err)
		}
	}
	// A create through a link the mirror does not show (it leads nowhere) lands where
	// the link leads, where the kernel checked nothing for the caller: refused for
	// nobody, done for root (the positive control).
	for _, name := range []string{"nb/hidden", "nb/hidden-root"} {
		if err := os.Symlink(e.s("rootdir/"+filepath.Base(name)), e.s(name)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := as("sh", "-c", "echo x > "+e.m("nb/hidden")); err == nil {
		t.Errorf("nobody created a file in root's directory through a hidden link: %q", out)
	}
	if _, err := os.Lstat(e.s("rootdir/hidden")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("root's directory has nobody's file (%v)", err)
	}
	if err := os.WriteFile(e.m("nb/hidden-root"), []byte("x"), 0o644); err != nil {
		t.Errorf("control: root creates through a hidden link: %v", err)
	}
	if _, err := os.Lstat(e.s("rootdir/hidden-root")); err != nil {
		t.Errorf("control: root's file through the hidden link: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(e.s("nb/rename"), &st); err != nil {
		t.Errorf("nobody's file moved: %v", err)
	}
	if err := syscall.Stat(e.s("nb/link"), &st); err != nil || st.Nlink != 1 {
		t.Errorf("nobody's file has %d links (%v), want 1", st.Nlink, err)
	}

	// Removing and replacing in a sticky directory: a file of nobody's, looked up
	// through the mount, replaced on the host by one of root's.
	replace := func(name string) {
		t.Helper()
		if err := os.Remove(e.s("tmp/" + name)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(e.s("tmp/"+name), []byte("root's"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rootsIntact := func(what, name string) {
		t.Helper()
		if b, err := os.ReadFile(e.s("tmp/" + name)); err != nil || string(b) != "root's" {
			t.Errorf("%s: root's file tmp/%s is now %q (%v)", what, name, b, err)
		}
	}
	for _, name := range []string{"u", "s", "d", "x", "mine1", "mine2", "mine3", "mine4", "mine5"} {
		if out, err := as("sh", "-c", "echo mine > "+e.m("tmp/"+name)); err != nil {
			t.Fatalf("control: nobody creates tmp/%s: %q, %v", name, out, err)
		}
	}
	if out, err := as("sh", "-c", "touch "+e.m("tmp/c")+" && mv "+e.m("tmp/c")+" "+e.m("tmp/c2")+" && rm "+e.m("tmp/c2")); err != nil {
		t.Fatalf("control: nobody renames and removes its own file in the sticky directory: %q, %v", out, err)
	}
	if out, err := as("stat", e.m("tmp/u"), e.m("tmp/s"), e.m("tmp/d"), e.m("tmp/x")); err != nil {
		t.Fatalf("stat: %q, %v", out, err)
	}
	replace("u")
	if out, err := as("rm", "-f", e.m("tmp/u")); err == nil {
		t.Errorf("unlink: nobody removed root's file from the sticky directory: %q", out)
	}
	rootsIntact("unlink", "u")
	replace("s")
	if out, err := as("mv", "-T", e.m("tmp/s"), e.m("tmp/s2")); err == nil {
		t.Errorf("rename: nobody renamed root's file in the sticky directory: %q", out)
	}
	rootsIntact("rename from", "s")
	replace("d")
	if out, err := as("mv", "-T", e.m("tmp/mine1"), e.m("tmp/d")); err == nil {
		t.Errorf("rename over: nobody replaced root's file in the sticky directory: %q", out)
	}
	rootsIntact("rename over", "d")
	// RENAME_EXCHANGE: the kernel looks the second name up again for a plain rename
	// (LOOKUP_RENAME_TARGET), which catches the cases above and below by itself,
	// but not for an exchange.
	replace("x")
	if err := onNobodyThread(func() error {
		return unix.Renameat2(unix.AT_FDCWD, e.m("tmp/mine3"), unix.AT_FDCWD, e.m("tmp/x"), unix.RENAME_EXCHANGE)
	}); err == nil {
		t.Errorf("exchange: nobody exchanged its file with root's in the sticky directory")
	}
	rootsIntact("exchange", "x")
	// A link the mirror does not show (it leads nowhere outside SOURCE), which the
	// kernel sees as a free name: replaced by a rename only as the sticky bit allows.
	for name, owner := range map[string]int{"hl": 0, "hl2": nobody} {
		if err := os.Symlink(e.outside+"/nowhere", e.s("tmp/"+name)); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(e.s("tmp/"+name), owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	// rename(2) itself: mv tries RENAME_NOREPLACE first, which the host refuses
	// (EEXIST) for a name the mirror shows as free, and coreutils then sometimes
	// gives up without the plain rename.
	if err := onNobodyThread(func() error { return unix.Rename(e.m("tmp/mine4"), e.m("tmp/hl")) }); err == nil {
		t.Errorf("rename over a hidden link: nobody replaced root's link in the sticky directory")
	}
	if to, err := os.Readlink(e.s("tmp/hl")); err != nil || to != e.outside+"/nowhere" {
		t.Errorf("root's hidden link is now %q (%v)", to, err)
	}
	if err := onNobodyThread(func() error { return unix.Rename(e.m("tmp/mine5"), e.m("tmp/hl2")) }); err != nil {
		t.Errorf("control: nobody renames over its own hidden link: %v", err)
	}
	// A name the kernel saw free (a negative entry, when it keeps one) that root's
	// file took on the host since.
	if _, err := as("stat", e.m("tmp/free")); err == nil {
		t.Fatal("tmp/free exists")
	}
	if err := os.WriteFile(e.s("tmp/free"), []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := as("mv", "-T", e.m("tmp/mine2"), e.m("tmp/free")); err == nil {
		t.Errorf("rename onto a free name: nobody replaced root's file that took it: %q", out)
	}
	rootsIntact("rename onto a free name", "free")
}

// onNobodyThread runs fn on an OS thread whose credentials alone are nobody's
// (credentials are per thread in Linux; the raw calls bypass Go's setuid, which
// changes every thread), for system calls no command-line tool makes. The thread
// is never unlocked, so it ends with the goroutine.
func onNobodyThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		for _, c := range [][4]uintptr{{unix.SYS_SETGROUPS, 0, 0, 0}, {unix.SYS_SETRESGID, nobody, nobody, nobody}, {unix.SYS_SETRESUID, nobody, nobody, nobody}} {
			if _, _, e := unix.RawSyscall(c[0], c[1], c[2], c[3]); e != 0 {
				errc <- e
				return
			}
		}
		errc <- fn()
	}()
	return <-errc
}

// TestFIFOAtAFilesPlace: a regular file replaced on the host by a FIFO, opened for
// reading through the mount within the cache timeout, reaches the daemon as an
// OPEN of a regular file. The daemon must not wait in that open for a writer (a few
// such opens would hold every thread that reads requests, and the mount with
// them): it opens without blocking, finds another inode, and answers ESTALE; the
// kernel looks the name up again and the caller waits for a writer in the kernel's
// own FIFO code, as on any file system. The negative control is the caller's wait
// channel: without O_NONBLOCK it waits for the daemon's answer instead.
func TestFIFOAtAFilesPlace(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "file src/f content")
	if b, err := os.ReadFile(e.m("f")); err != nil || string(b) != "content" {
		t.Fatalf("control: read f -> content: %q, %v", b, err)
	}
	if err := os.Remove(e.s("f")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(e.s("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	cat := exec.Command("cat", e.m("f"))
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cat.Wait() }()
	var wchan string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", cat.Process.Pid))
		if wchan = string(b); wchan == "wait_for_partner" {
			break
		}
	}
	// Release a daemon that waits in the host's FIFO for a writer (a reader-writer
	// open of a FIFO never blocks, and wakes its readers), then end cat: a caller
	// whose request the daemon holds cannot be killed until it is answered. (The
	// mount's FIFO is another pipe: the kernel keeps a FUSE FIFO to itself.)
	w, err := os.OpenFile(e.s("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	cat.Process.Kill()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		e.abort()
		<-done
		t.Error("cat was not ended by SIGKILL within 10 s")
	}
	if wchan != "wait_for_partner" {
		t.Errorf("the reader of the FIFO waits in %q, want the kernel's FIFO wait (wait_for_partner): the daemon held its OPEN", wchan)
	}
}

// TestConfusedDeputyDirectoryRead: the kernel checks a caller's search permission
// on a directory against its cached attributes. A directory the caller may search,
// renamed away on the host and replaced at its name by root's private one within
// the cache timeout, must not show the caller the private one's entries, nor open
// a world-readable file in it (which the caller cannot reach on the host).
func TestConfusedDeputyDirectoryRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the daemon is a deputy only as root (allow_other, default_permissions)")
	}
	e := newEnv(t, policy.WorkspaceWrite, "dir src/pub", "file src/priv/readable secret")
	if err := os.Chmod(e.base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.s("priv"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.s("priv/readable"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(e.s("pub"), nobody, nobody); err != nil {
		t.Fatal(err)
	}
	as := asNobody
	if out, err := as("cat", e.m("priv/readable")); err == nil {
		t.Fatalf("control: nobody read a file in root's private directory: %q", out)
	}
	// Caches pub's attributes, not its entries.
	if out, err := as("stat", e.m("pub")); err != nil {
		t.Fatalf("control: nobody stats its directory: %q, %v", out, err)
	}
	if err := os.Rename(e.s("pub"), e.s("pub.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.s("priv"), e.s("pub")); err != nil {
		t.Fatal(err)
	}
	if out, err := as("cat", e.m("pub/readable")); err == nil || strings.Contains(out, "secret") {
		t.Errorf("nobody read a file in root's private directory moved in at its own's name: %q, %v", out, err)
	}
	if b, err := os.ReadFile(e.m("pub/readable")); err != nil || string(b) != "secret" {
		t.Errorf("control: root reads pub/readable -> secret: %q, %v", b, err)
	}
}

// TestSourceReplaced: SOURCE renamed away on the host and another directory made
// at its path is not the mounted directory: reads and writes through the mount
// answer ESTALE (nothing lands in either directory), the fence says so once, and
// the mount works again when the mounted directory is back at its path.
func TestSourceReplaced(t *testing.T) {
	const timeout = 100 * time.Millisecond
	e := newEnvTimeout(t, policy.WorkspaceWrite, timeout, "file src/f mounted")
	if b, err := os.ReadFile(e.m("f")); err != nil || string(b) != "mounted" {
		t.Fatalf("control: read f -> mounted: %q, %v", b, err)
	}
	pol, err := os.ReadFile(e.policy)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.src, e.src+".old"); err != nil {
		t.Fatal(err)
	}
	testutil.MakeTree(t, e.base, "file src/f other", "dir src/.toh")
	if err := os.WriteFile(e.policy, pol, 0o644); err != nil {
		t.Fatal(err)
	}
	// Until the cache timeout the kernel, and the daemon's cached directories, still
	// answer from the mounted directory, which is the truth about it.
	time.Sleep(3 * timeout)
	if _, err := os.Stat(e.m("g")); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("stat of a new name: %v, want ESTALE", err)
	}
	if err := os.WriteFile(e.m("h"), []byte("x"), 0o644); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("create: %v, want ESTALE", err)
	}
	for _, dir := range []string{e.src, e.src + ".old"} {
		if _, err := os.Lstat(dir + "/h"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s/h exists (%v)", dir, err)
		}
	}
	n := 0
	for _, l := range e.logged() {
		if strings.Contains(l, "is no longer the directory that was mounted") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the fence said %d times that SOURCE was replaced, want once; logged: %q", n, e.logged())
	}
	if err := os.RemoveAll(e.src); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.src+".old", e.src); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.m("h"), []byte("x"), 0o644); err != nil {
		t.Errorf("create after SOURCE came back: %v", err)
	}
}

// TestConfusedDeputyLinkOut: a link leading out of SOURCE is shown as what it leads
// to, and the daemon follows it with its own rights, through directories the kernel
// checked nothing against. As root, a world-readable file inside root's private
// directory must not be read, nor a world-readable directory inside it listed, for
// a user who could not reach them on the host; what that user could reach is
// still shown and read (positive control), and root reads everything.
func TestConfusedDeputyLinkOut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the daemon is a deputy only as root (allow_other, default_permissions)")
	}
	e := newEnv(t, policy.WorkspaceWrite, "file outside/pub/file public", "file outside/priv/readable topsecret",
		"file outside/priv/sub/listed entry", "dir src/nb",
		"file extra/pubw/open open", "file extra/privw/open open", // extra is a writable root
		"dir extra/pubw/pubdir", "dir extra/privw/pubdir")
	for p, mode := range map[string]os.FileMode{e.base: 0o755, e.outside: 0o755, e.outside + "/pub": 0o755,
		e.outside + "/priv": 0o700, e.outside + "/priv/readable": 0o644, e.outside + "/priv/sub": 0o755,
		e.extra: 0o755, e.extra + "/pubw": 0o755, e.extra + "/pubw/open": 0o666, e.extra + "/pubw/pubdir": 0o777,
		e.extra + "/privw": 0o700, e.extra + "/privw/open": 0o666, e.extra + "/privw/pubdir": 0o777} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Setxattr(e.outside+"/priv/readable", "user.k", []byte("sec-value"), 0); err != nil {
		t.Skipf("no user xattrs on %s: %v", e.outside, err)
	}
	for name, to := range map[string]string{"pub": e.outside + "/pub/file", "sec": e.outside + "/priv/readable", "dir": e.outside + "/priv/sub",
		"wpub": e.extra + "/pubw/open", "wpriv": e.extra + "/privw/open",
		"wpubdir": e.extra + "/pubw/pubdir", "wprivdir": e.extra + "/privw/pubdir"} {
		if err := os.Symlink(to, e.s("nb/"+name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := exec.LookPath("getfattr"); err != nil {
		t.Fatal("getfattr (Debian's attr, which scripts/test.sh installs) is needed, or the xattr case could not fail")
	}
	as := asNobody
	if out, err := as("cat", e.outside+"/priv/readable"); err == nil {
		t.Fatalf("control: nobody reads root's private file on the host: %q", out)
	}
	if out, err := as("cat", e.m("nb/pub")); err != nil || out != "public" {
		t.Errorf("control: nobody reads through a link to a public file: %q, %v", out, err)
	}
	e.noRecords("nobody reads through a link to a public file")
	if out, err := as("cat", e.m("nb/sec")); err == nil || strings.Contains(out, "topsecret") {
		t.Errorf("nobody read a file in root's private directory through a link: %q, %v", out, err)
	}
	e.refusedAs(nobody, "reading nb/sec", RuleUnreachable, "nb/sec", "lookup")
	if out, err := as("ls", e.m("nb/dir")); err == nil || strings.Contains(out, "listed") {
		t.Errorf("nobody listed a directory inside root's private one through a link: %q, %v", out, err)
	}
	e.refusedAs(nobody, "listing nb/dir", RuleUnreachable, "nb/dir", "lookup")
	if out, err := as("getfattr", "--absolute-names", "--only-values", "-n", "user.k", e.m("nb/sec")); err == nil || strings.Contains(out, "sec-value") {
		t.Errorf("nobody read an xattr of a file in root's private directory through a link: %q, %v", out, err)
	}
	e.refusedAs(nobody, "reading an xattr of nb/sec", RuleUnreachable, "nb/sec", "lookup")

	// Writes: a world-writable file in a writable root, in a public directory and in
	// root's private one.
	if out, err := as("sh", "-c", "printf x >> "+e.m("nb/wpub")); err != nil {
		t.Errorf("control: nobody appends through a link to a public world-writable file: %q, %v", out, err)
	}
	if b, _ := os.ReadFile(e.extra + "/pubw/open"); string(b) != "openx" {
		t.Errorf("control: the public file is %q, want openx", b)
	}
	e.noRecords("nobody appends through a link to a public file")
	if out, err := as("sh", "-c", "printf x >> "+e.m("nb/wpriv")); err == nil {
		t.Errorf("nobody appended through a link to a file in root's private directory: %q", out)
	}
	e.refusedAs(nobody, "appending to nb/wpriv", RuleUnreachable, "nb/wpriv", "lookup")
	if b, _ := os.ReadFile(e.extra + "/privw/open"); string(b) != "open" {
		t.Errorf("root's private file is %q, want it unchanged", b)
	}
	// Changes that are no open: truncate(2), utimes to now, an xattr, a new name. The
	// kernel lets nobody do each on the world-writable file or directory it sees.
	past := time.Unix(1_000_000_000, 0)
	if err := os.Chtimes(e.extra+"/privw/open", past, past); err != nil {
		t.Fatal(err)
	}
	for what, call := range map[string]func(string) error{
		"truncate":  func(p string) error { return unix.Truncate(p, 1) },
		"utimes":    func(p string) error { return unix.Utimes(p, nil) },
		"setxattr":  func(p string) error { return unix.Setxattr(p, "user.n", []byte("v"), 0) },
		"create in": func(p string) error { return os.WriteFile(p+"dir/new", nil, 0o644) },
	} {
		if err := onNobodyThread(func() error { return call(e.m("nb/wpriv")) }); err == nil {
			t.Errorf("nobody's %s through a link reached root's private directory", what)
		}
		if err := onNobodyThread(func() error { return call(e.m("nb/wpub")) }); err != nil {
			t.Errorf("control: nobody's %s through a link to a public directory: %v", what, err)
		}
	}
	if fi, err := os.Stat(e.extra + "/privw/open"); err != nil || fi.Size() != int64(len("open")) || !fi.ModTime().Equal(past) {
		t.Errorf("root's private file changed: %v, %v", fi, err)
	}
	if _, err := unix.Getxattr(e.extra+"/privw/open", "user.n", nil); err == nil {
		t.Error("root's private file got nobody's xattr")
	}
	if _, err := os.Lstat(e.extra + "/privw/pubdir/new"); err == nil {
		t.Error("nobody's new file is in root's private directory")
	}
	if b, err := os.ReadFile(e.m("nb/sec")); err != nil || string(b) != "topsecret" {
		t.Errorf("control: root reads through the link: %q, %v", b, err)
	}
	if b, err := unix.Getxattr(e.m("nb/sec"), "user.k", make([]byte, 64)); err != nil || b != len("sec-value") {
		t.Errorf("control: root reads the xattr through the link: %d, %v", b, err)
	}
	if ents, err := os.ReadDir(e.m("nb/dir")); err != nil || len(ents) != 1 {
		t.Errorf("control: root lists through the link: %v, %v", ents, err)
	}

	// Names and attributes: nobody may not learn what lies in root's private
	// directory by looking names up, not even right after root looked them up and
	// listed them (the kernel's dentries are shared between callers).
	if out, err := as("stat", "-c", "%s", e.m("nb/pub")); err != nil || strings.TrimSpace(out) != "6" {
		t.Errorf("control: nobody stats a public file through a link: %q, %v", out, err)
	}
	for round, rootFirst := range []bool{false, true} {
		if rootFirst {
			if out, err := exec.Command("ls", "-laR", e.m("nb")).CombinedOutput(); err != nil || !strings.Contains(string(out), "listed") {
				t.Fatalf("control: root lists nb recursively: %q, %v", out, err)
			}
			if fi, err := os.Stat(e.m("nb/dir/listed")); err != nil || fi.Size() != int64(len("entry")) {
				t.Errorf("control: root stats a name below the link: %v, %v", fi, err)
			}
		}
		for _, name := range []string{"nb/sec", "nb/dir", "nb/dir/listed"} {
			if out, err := as("stat", "-c", "%s %U", e.m(name)); err == nil {
				t.Errorf("round %d: nobody learned the attributes of %s, inside root's private directory: %q", round, name, out)
			}
		}
	}
}

// nobody is the caller the deputy tests act as.
const nobody = 65534

// asNobody runs a command as nobody and returns its combined output.
func asNobody(args ...string) (string, error) {
	return asNobodyIn(nil, args...)
}

// asNobodyIn runs a command as nobody with the supplementary groups groups.
func asNobodyIn(groups []uint32, args ...string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: groups}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestLinkOutGroupsAndACLs: what a caller may reach through a link out of SOURCE
// is decided as the host decides it: by the caller's supplementary groups and by
// the directories' POSIX ACLs, not by the modes and the primary group alone.
// Each case is checked on the host first (as nobody, with and without one more
// group) and must come out the same through the mount; every refusal is one
// audit record. The allowed cases failed before the fence read the caller's
// groups and the ACLs (they were refused, erring towards no); the refused ones
// fail when canSearch says yes.
func TestLinkOutGroupsAndACLs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the daemon is a deputy only as root (allow_other, default_permissions)")
	}
	const group = 4242 // a group nobody is not in, but for the runs that add it
	e := newEnv(t, policy.WorkspaceWrite, "dir src/nb", "file outside/grp/f grp", "file outside/grpdeny/f grpdeny",
		"file outside/acl/f acl", "file outside/acldeny/f acldeny", "file outside/aclgrp/f aclgrp")
	dirs := map[string]os.FileMode{"grp": 0o750, "grpdeny": 0o705, "acl": 0o700, "acldeny": 0o755, "aclgrp": 0o700}
	for p, mode := range map[string]os.FileMode{e.base: 0o755, e.outside: 0o755} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	for d, mode := range dirs {
		if err := os.Chmod(e.outside+"/"+d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(e.outside+"/"+d, 0, group); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(e.outside+"/"+d+"/f", 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(e.outside+"/"+d+"/f", e.s("nb/"+d)); err != nil {
			t.Fatal(err)
		}
	}
	const all = ^uint32(0)
	setACL(t, e.outside+"/acl", aclBytes( // user:nobody:r-x, nothing for the rest
		[3]uint32{posixacl.UserObj, 7, all}, [3]uint32{posixacl.User, 5, nobody}, [3]uint32{posixacl.GroupObj, 0, all}, [3]uint32{posixacl.Mask, 5, all}, [3]uint32{posixacl.Other, 0, all}))
	setACL(t, e.outside+"/acldeny", aclBytes( // user:nobody:---, r-x for the rest
		[3]uint32{posixacl.UserObj, 7, all}, [3]uint32{posixacl.User, 0, nobody}, [3]uint32{posixacl.GroupObj, 5, all}, [3]uint32{posixacl.Mask, 5, all}, [3]uint32{posixacl.Other, 5, all}))
	setACL(t, e.outside+"/aclgrp", aclBytes( // group:4242:r-x, nothing for the rest
		[3]uint32{posixacl.UserObj, 7, all}, [3]uint32{posixacl.GroupObj, 0, all}, [3]uint32{posixacl.Group, 5, group}, [3]uint32{posixacl.Mask, 5, all}, [3]uint32{posixacl.Other, 0, all}))

	for _, c := range []struct {
		dir    string
		groups []uint32
		want   bool // nobody may read dir/f on the host
	}{
		{"grp", []uint32{group}, true},
		{"grp", nil, false},
		{"grpdeny", []uint32{group}, false}, // the group's bits deny where the others' allow
		{"grpdeny", nil, true},
		{"acl", nil, true},
		{"acldeny", []uint32{group}, false},
		{"aclgrp", []uint32{group}, true},
		{"aclgrp", nil, false},
	} {
		what := fmt.Sprintf("nobody with groups %v reading %s/f", c.groups, c.dir)
		if out, err := asNobodyIn(c.groups, "cat", e.outside+"/"+c.dir+"/f"); (err == nil) != c.want {
			t.Fatalf("control: %s on the host: %q, %v; want allowed=%v", what, out, err, c.want)
		}
		out, err := asNobodyIn(c.groups, "cat", e.m("nb/"+c.dir))
		if (err == nil) != c.want || c.want && out != c.dir {
			t.Errorf("%s through a link: %q, %v; want allowed=%v as on the host", what, out, err, c.want)
		}
		if c.want {
			e.noRecords(what)
		} else {
			e.refusedAs(nobody, what, RuleUnreachable, "nb/"+c.dir, "lookup")
		}
	}
}

// TestConfusedDeputyReplaced: as TestConfusedDeputy, for names inside SOURCE that
// the kernel caches (the links there lead out of SOURCE, whose entry points are
// never cached, so the kernel looks them up afresh and checks the caller itself).
// Each name here is one nobody may use, checked by the kernel against its cached
// attributes, then replaced on the host by root's private file within the cache
// timeout: reading it, appending to it, chmodding it, hard-linking it and reading
// its xattr must not act on root's file in nobody's name. Each step has its
// positive control (the same call before the replacement succeeds) and its
// negative one (root's file unchanged and unread); each fails without the
// identity checks (node.isNode).
func TestConfusedDeputyReplaced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the daemon is a deputy only as root (allow_other, default_permissions)")
	}
	tree := []string{"dir src/nb", "file src/d/r public", "file src/d/w open", "file src/d/c mine",
		"file src/d/l0 mine2", "file src/d/l mine2", "file src/d/x public"}
	for _, name := range []string{"r", "w", "c", "l", "x"} {
		tree = append(tree, "file src/d/root-"+name+" root-"+name)
	}
	e := newEnvTimeout(t, policy.WorkspaceWrite, time.Minute, tree...)
	modes := map[string]os.FileMode{e.base: 0o755, e.src: 0o755, e.s("d"): 0o755,
		e.s("d/r"): 0o644, e.s("d/w"): 0o666, e.s("d/x"): 0o644}
	for _, name := range []string{"r", "w", "c", "l", "x"} {
		modes[e.s("d/root-"+name)] = 0o600
	}
	for p, mode := range modes {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	// l0 and l are two files of nobody's: the control links l0 (a file with other
	// names may not be linked through the mount at all, so it cannot be l's own
	// name), and the attempt goes through the kernel's cached node of l.
	for _, p := range []string{e.s("nb"), e.s("d/c"), e.s("d/l0"), e.s("d/l")} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	// replace moves root's private file over name on the host, where the kernel,
	// which cached name a moment ago, does not see it.
	replace := func(name string) {
		t.Helper()
		if err := os.Rename(e.s("d/root-"+name), e.s("d/"+name)); err != nil {
			t.Fatal(err)
		}
	}
	rootFile := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(e.s("d/" + name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// Read.
	if out, err := asNobody("cat", e.m("d/r")); err != nil || out != "public" {
		t.Fatalf("control: nobody reads r: %q, %v", out, err)
	}
	replace("r")
	if out, err := asNobody("cat", e.m("d/r")); err == nil || strings.Contains(out, "root-r") {
		t.Errorf("nobody read r after root's private file replaced it: %q, %v", out, err)
	}

	// Write.
	if out, err := asNobody("sh", "-c", "printf x >> "+e.m("d/w")); err != nil {
		t.Fatalf("control: nobody appends to w: %q, %v", out, err)
	}
	replace("w")
	if out, err := asNobody("sh", "-c", "printf x >> "+e.m("d/w")); err == nil {
		t.Errorf("nobody appended to w after root's private file replaced it: %q", out)
	}
	if b := rootFile("w"); b != "root-w" {
		t.Errorf("root's file changed: %q", b)
	}

	// Chmod.
	if out, err := asNobody("chmod", "644", e.m("d/c")); err != nil {
		t.Fatalf("control: nobody chmods its own c: %q, %v", out, err)
	}
	replace("c")
	if out, err := asNobody("chmod", "666", e.m("d/c")); err == nil {
		t.Errorf("nobody chmodded c after root's private file replaced it: %q", out)
	}
	if fi, err := os.Stat(e.s("d/c")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("root's file's mode changed: %v, %v", fi.Mode(), err)
	}

	// Hard link (protected_hardlinks: nobody may link what it owns).
	if out, err := asNobody("ln", e.m("d/l0"), e.m("nb/hard1")); err != nil {
		t.Fatalf("control: nobody links its own l0: %q, %v", out, err)
	}
	if out, err := asNobody("stat", e.m("d/l")); err != nil {
		t.Fatalf("stat l: %q, %v", out, err)
	}
	replace("l")
	if out, err := asNobody("ln", e.m("d/l"), e.m("nb/hard2")); err == nil {
		t.Errorf("nobody hard-linked l after root's private file replaced it: %q", out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(e.s("d/l"), &st); err != nil || st.Nlink != 1 {
		t.Errorf("root's file has %d links (%v), want 1", st.Nlink, err)
	}

	// Xattr read (user.* needs read permission on the file).
	for name, v := range map[string]string{"d/x": "pub-value", "d/root-x": "sec-value"} {
		if err := unix.Setxattr(e.s(name), "user.k", []byte(v), 0); err != nil {
			t.Skipf("no user xattrs on %s: %v", e.src, err)
		}
	}
	get := []string{"getfattr", "--absolute-names", "--only-values", "-n", "user.k", e.m("d/x")}
	if out, err := asNobody(get...); err != nil || out != "pub-value" {
		t.Fatalf("control: nobody reads user.k of x: %q, %v", out, err)
	}
	replace("x")
	if out, err := asNobody(get...); err == nil || strings.Contains(out, "sec-value") {
		t.Errorf("nobody read user.k of x after root's private file replaced it: %q, %v", out, err)
	}
	if out, err := exec.Command(get[0], get[1:]...).CombinedOutput(); err != nil || string(out) != "sec-value" {
		t.Errorf("control: root reads user.k of x: %q, %v", out, err)
	}
}

// TestGetattrOfReplacedName: GETATTR of a node whose name now holds another object
// on the host (here a file replaced by a directory) answers ESTALE instead of the
// other object's attributes under the node: a descriptor on the old file says so,
// and the path, looked up again, shows the directory.
func TestGetattrOfReplacedName(t *testing.T) {
	const timeout = 100 * time.Millisecond
	e := newEnvTimeout(t, policy.WorkspaceWrite, timeout, "file src/f old")
	fd, err := unix.Open(e.m("f"), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatalf("control: fstat of f: mode %o, %v", st.Mode, err)
	}
	if err := os.Remove(e.s("f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.s("f"), 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * timeout) // the kernel's attributes of f expire
	if err := unix.Fstat(fd, &st); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("fstat of the old f after it became a directory: mode %o, %v; want ESTALE", st.Mode, err)
	}
	if fi, err := os.Stat(e.m("f")); err != nil || !fi.IsDir() {
		t.Errorf("stat of f by path: %v, %v; want the directory", fi, err)
	}
}

// TestACLsEnforced: on a mount other users see, the kernel checks each caller
// against the host's POSIX ACLs (FUSE_POSIX_ACL), not the modes alone. Without it a
// root daemon read a file and listed a directory whose ACL denies nobody, because
// their "other" bits allow reading; and refused what an ACL grants beyond the
// modes. Each case below fails without it.
func TestACLsEnforced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the daemon is a deputy only as root (allow_other, default_permissions)")
	}
	e := newEnv(t, policy.WorkspaceWrite, "file src/deny secret", "file src/plain public",
		"file src/grant granted", "file src/ddeny/x inside", "file src/dplain/x inside")
	for p, mode := range map[string]os.FileMode{e.base: 0o755, e.src: 0o755, e.s("deny"): 0o644, e.s("plain"): 0o644,
		e.s("grant"): 0o600, e.s("ddeny"): 0o755, e.s("ddeny/x"): 0o644, e.s("dplain"): 0o755, e.s("dplain/x"): 0o644} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	// user::rw(x) user:nobody:PERM group::r(x) mask::r(x) other::OTHER(x)
	acl := func(p string, nobodyPerm, other, x uint32) {
		t.Helper()
		const all = ^uint32(0)
		setACL(t, p, aclBytes([3]uint32{posixacl.UserObj, 6 | x, all}, [3]uint32{posixacl.User, nobodyPerm, nobody},
			[3]uint32{posixacl.GroupObj, 4 | x, all}, [3]uint32{posixacl.Mask, 4 | x, all}, [3]uint32{posixacl.Other, other | x, all}))
	}
	acl(e.s("deny"), 0, 4, 0)
	acl(e.s("ddeny"), 0, 4, 1)
	acl(e.s("grant"), 4, 0, 0) // mode 0640 now: only the ACL lets nobody read

	for _, c := range []struct {
		args []string
		want bool // nobody may, on the host
	}{
		{[]string{"cat", "deny"}, false},
		{[]string{"cat", "plain"}, true},
		{[]string{"cat", "grant"}, true},
		{[]string{"ls", "ddeny"}, false},
		{[]string{"cat", "ddeny/x"}, false},
		{[]string{"ls", "dplain"}, true},
		{[]string{"cat", "dplain/x"}, true},
	} {
		host := append([]string{c.args[0]}, e.s(c.args[1]))
		if _, err := asNobody(host...); (err == nil) != c.want {
			t.Fatalf("control: nobody's %v on the host: %v, want allowed=%v", c.args, err, c.want)
		}
		// Root first: its own checks and the dentries they leave must not decide for nobody.
		if out, err := exec.Command(c.args[0], e.m(c.args[1])).CombinedOutput(); err != nil {
			t.Errorf("control: root's %v through the mount: %q, %v", c.args, out, err)
		}
		if out, err := asNobody(c.args[0], e.m(c.args[1])); (err == nil) != c.want {
			t.Errorf("nobody's %v through the mount: %q, %v; want allowed=%v as on the host", c.args, out, err, c.want)
		}
	}
}

// TestProtectedSymlinks: the host's fs.protected_symlinks, which the kernel checks
// at every follow, root's included, holds through the mount for links the mirror
// shows as what they lead to (the daemon follows those): in a sticky
// world-writable directory, a link owned by neither the follower nor the
// directory's owner is not followed. Without the check root wrote through nobody's
// planted link.
func TestProtectedSymlinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs a link owned by another user")
	}
	e := newEnv(t, policy.WorkspaceWrite, "dir src/shared", "file extra/target orig", "file extra/mine mine")
	hostOn := !sysctlOff("/proc/sys/fs/protected_symlinks")
	for p, mode := range map[string]os.FileMode{e.base: 0o755, e.src: 0o755, e.extra: 0o755,
		e.s("shared"): 0o777 | os.ModeSticky, e.extra + "/target": 0o644, e.extra + "/mine": 0o644} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	for name, to := range map[string]string{"evil": e.extra + "/target", "dang": e.extra + "/planted",
		"ok": e.extra + "/mine", "okdang": e.extra + "/made"} {
		if err := os.Symlink(to, e.s("shared/"+name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"evil", "dang"} {
		if err := os.Lchown(e.s("shared/"+name), nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	if !hostOn {
		// The fence follows the host: off here, so root writes through, as natively.
		if err := os.WriteFile(e.m("shared/evil"), []byte("orig"), 0o644); err != nil {
			t.Errorf("control: with fs.protected_symlinks off root writes through nobody's link: %v", err)
		}
		t.Log("fs.protected_symlinks is off on this host: the rest runs with the fence's copy of it switched on, without the host control")
		e.fence.f.protectedSymlinks.Store(true)
	} else if err := os.WriteFile(e.s("shared/evil"), []byte("x"), 0o644); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("control: root writes through nobody's link on the host: %v, want EACCES", err)
	}
	e.records() // the host control's, if any
	// The link shown as its target is refused at its lookup; the dangling one, not
	// shown, by the create that would follow it.
	for name, op := range map[string]string{"evil": "lookup", "dang": "create"} {
		if err := os.WriteFile(e.m("shared/"+name), []byte("pwned"), 0o644); err == nil {
			t.Errorf("root wrote through nobody's link %s in a sticky directory", name)
		}
		e.refusedAs(0, "root writing through "+name, RuleProtectedSymlink, "shared/"+name, op)
	}
	// The record names the link refused, not where it leads.
	os.ReadFile(e.m("shared/evil"))
	if recs := e.records(); len(recs) == 0 || recs[0].HostPath != e.s("shared/evil") {
		t.Errorf("the refusal of shared/evil: records %+v, want its host path %s", recs, e.s("shared/evil"))
	}
	if b, _ := os.ReadFile(e.extra + "/target"); string(b) != "orig" {
		t.Errorf("the link's target is %q, want orig", b)
	}
	if _, err := os.Lstat(e.extra + "/planted"); err == nil {
		t.Error("root created the file nobody's dangling link leads to")
	}
	if _, err := os.ReadFile(e.m("shared/evil")); err == nil {
		t.Error("root read through nobody's link in a sticky directory")
	}
	e.refusedAs(0, "root reading through evil", RuleProtectedSymlink, "shared/evil", "lookup")
	// Positive controls: the directory owner's links, and nobody following its own.
	for _, name := range []string{"ok", "okdang"} {
		if err := os.WriteFile(e.m("shared/"+name), []byte("fine"), 0o644); err != nil {
			t.Errorf("control: root writes through its own link %s: %v", name, err)
		}
	}
	if b, _ := os.ReadFile(e.extra + "/made"); string(b) != "fine" {
		t.Errorf("control: root's dangling link made %q, want fine", b)
	}
	if out, err := asNobody("cat", e.m("shared/evil")); err != nil || out != "orig" {
		t.Errorf("control: nobody reads through its own link: %q, %v", out, err)
	}
	e.noRecords("following one's own links")
}

// TestEntryPointsUncached: on a shared mount the name of a link that leaves SOURCE
// (an entry point) reaches the kernel with zero entry and attribute timeouts, so
// each caller's walk looks it up again and is checked against what it leads to now
// (see TestConfusedDeputyLinkOut). go-fuse replaces a zero timeout with the
// mount's, so the fence asks for 1 ns and its raw wrapper turns that into 0; were
// the wrapper ever bypassed, the kernel would round 1 ns up to a jiffy and cache
// the name for that long. The replies are read from go-fuse's request log, which
// prints what is sent. Positive control: a plain name gets the mount's timeouts.
func TestEntryPointsUncached(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a mount other users see (allow_other, as root) uncaches entry points")
	}
	t.Setenv("TOH_FUSE_DEBUG", "1")
	e := newEnvTimeout(t, policy.WorkspaceWrite, time.Minute,
		"file outside/target out", "file src/plain in", "link src/entry -> $BASE/outside/target")
	for _, name := range []string{"entry", "plain"} {
		if _, err := os.Stat(e.m(name)); err != nil {
			t.Fatal(err)
		}
	}
	timeouts := func(name string) string {
		t.Helper()
		rx := regexp.MustCompile(`^rx (\d+): LOOKUP n\d+ +"` + name + `" `)
		for _, l := range e.logged() {
			m := rx.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			tx := regexp.MustCompile(`^tx ` + m[1] + `: +OK, \{n\d+ g\d+ (tE=\S+ tA=\S+) `)
			for _, l := range e.logged() {
				if m := tx.FindStringSubmatch(l); m != nil {
					return m[1]
				}
			}
		}
		t.Fatalf("no LOOKUP of %q and its reply in the request log", name)
		return ""
	}
	if got := timeouts("entry"); got != "tE=0s tA=0s" {
		t.Errorf("LOOKUP of the entry point answered %s, want tE=0s tA=0s", got)
	}
	if got := timeouts("plain"); got != "tE=60s tA=60s" {
		t.Errorf("control: LOOKUP of a plain name answered %s, want the mount's tE=60s tA=60s", got)
	}
}

// The xattrs of a symlink node are read from the link itself, reached by the
// verified walk: a directory on its host path swapped for a symlink (to a
// directory the caller cannot search) does not make the daemon read, with its
// rights, what lies there under the same name. Control: before the swap the link's
// own xattr reads as the link's.
func TestXattrsOfLinkAfterSwap(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnvTimeout(t, policy.WorkspaceWrite, time.Minute, "dir src/d", "link src/d/L -> x", "dir private", "file private/L secret")
	if err := os.Symlink(filepath.Join(e.base, "private"), e.s("dl")); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{e.base: 0o755, e.src: 0o755, e.s("d"): 0o755, filepath.Join(e.base, "private"): 0o700} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	for p, v := range map[string]string{e.s("d/L"): "link", filepath.Join(e.base, "private/L"): "TOPSECRET"} {
		if err := unix.Lsetxattr(p, "security.toh-test", []byte(v), 0); err != nil {
			t.Skipf("security.* xattrs cannot be set here: %v", err)
		}
	}
	read := func() (string, error) {
		var got string
		err := onNobodyThread(func() error {
			buf := make([]byte, 64)
			n, err := unix.Lgetxattr(e.m("d/L"), "security.toh-test", buf)
			if err == nil {
				got = string(buf[:n])
			}
			return err
		})
		return got, err
	}
	if got, err := read(); err != nil || got != "link" {
		t.Fatalf("control: the link's xattr reads %q, %v; want link", got, err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, e.s("d"), unix.AT_FDCWD, e.s("dl"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	if got, err := read(); got == "TOPSECRET" {
		t.Errorf("after the swap nobody read %q (err %v) through the link's node: the root-only file's xattr", got, err)
	}
	if got, err := read(); err == nil && got != "link" {
		t.Errorf("after the swap: %q, want the link's own xattr or an error", got)
	}
}

// The daemon lists xattrs as root, which sees trusted.* names; others see only
// their names' absence on the host, and through the mount the same. Root sees them
// (the control).
func TestTrustedXattrNamesHiddenFromOthers(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t, policy.WorkspaceWrite, "file src/f x")
	for _, p := range []string{e.base, e.src} {
		os.Chmod(p, 0o755)
	}
	os.Chmod(e.s("f"), 0o644)
	if err := unix.Setxattr(e.s("f"), "trusted.toh-test", []byte("s"), 0); err != nil {
		t.Skipf("trusted.* xattrs cannot be set here: %v", err)
	}
	if err := unix.Setxattr(e.s("f"), "user.toh-test", []byte("u"), 0); err != nil {
		t.Skipf("user.* xattrs cannot be set here: %v", err)
	}
	list := func(p string) ([]string, error) {
		buf := make([]byte, 256)
		n, err := unix.Listxattr(p, buf)
		if err != nil {
			return nil, err
		}
		return strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00"), nil
	}
	var host, mount []string
	var sizeOnly int
	if err := onNobodyThread(func() error {
		var err error
		if host, err = list(e.s("f")); err != nil {
			return err
		}
		if mount, err = list(e.m("f")); err != nil {
			return err
		}
		sizeOnly, err = unix.Listxattr(e.m("f"), nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(host, "trusted.toh-test") || !slices.Contains(host, "user.toh-test") {
		t.Fatalf("the host lists %q to nobody; the test assumes it hides trusted.*", host)
	}
	if !slices.Equal(mount, host) {
		t.Errorf("nobody lists %q through the mount, %q on the host", mount, host)
	}
	if want := len(strings.Join(host, "\x00")) + 1; sizeOnly != want {
		t.Errorf("size query through the mount: %d, want %d", sizeOnly, want)
	}
	if got, err := list(e.m("f")); err != nil || !slices.Contains(got, "trusted.toh-test") {
		t.Errorf("control: root lists %q, %v through the mount; want trusted.toh-test too", got, err)
	}
}
