package fusefence

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// The fence cases: one table of trees in the MakeTree notation, each naming a
// directory D where mutations aim and a file F they act on, crossed with every
// mutating operation (fenceOps). Each pair runs on a fresh tree and mount and checks
// the outcome the case's verdict predicts:
//
//   - denied: EACCES, exactly one audit record naming the operation, rule and path,
//     and the host (SOURCE, the canaries outside, the second writable root)
//     identical afterwards, inode numbers, sizes, times and xattrs included;
//   - allowed: success, the mutation landed where D or F really leads, nothing was
//     logged, and the canaries outside are byte-identical with the same inode, size
//     and mtime (their link count and ctime may change: a hard link to one can be
//     renamed or removed);
//   - hidden: a hidden name (an escaping link that leads nowhere): ENOENT from the
//     kernel, nothing logged, nothing changed;
//   - refused by the kernel (mknod of a device without CAP_MKNOD): EPERM, nothing
//     logged, nothing changed.
//
// A new edge case is one more row of fenceCases; it is then tried with every
// operation.

// hidden is the verdict for an operation on a name the mirror does not show.
const hidden = "(hidden)"

// kernelRefuses is the verdict for an operation the kernel refuses itself, with
// EPERM, before asking the fence: mknod of a device without CAP_MKNOD.
const kernelRefuses = "(EPERM from the kernel)"

// verdict is a case's expected rule ("" allowed) for each way an operation can
// touch it.
type verdict struct {
	dir     string // a new name in D, or rmdir of D/e
	dname   string // D's own name: rename D away, exchange a directory with D
	name    string // F's name: unlink, rename F away, exchange F
	replace string // F's name as a rename destination (rename over F)
	link    string // what F leads to, as the source of link(2)
	content string // what F leads to: open for writing, truncate, setattr, xattrs, descriptor writes
	create  string // open(F, O_CREAT): F's content, or a new file where a hidden link leads
	// dmode is D's own mode (chmod D) where it differs from dir: a submodule git
	// directory, writable within but kept itself (policy.ProtectedPath.Except).
	// "" means as dir.
	dmode string
}

func all(rule string) verdict { return verdict{rule, rule, rule, rule, rule, rule, rule, ""} }

// leadsOut is the verdict of a D that is (or is reached through) a symlink
// leading somewhere the rule denies: everything beneath it is denied, but the
// link's own name may be renamed.
func leadsOut(rule string) verdict {
	v := all(rule)
	v.dname = ""
	return v
}

type fenceCase struct {
	name  string
	mode  policy.Mode // "" is workspace-write
	tree  []string    // MakeTree lines relative to base ($BASE stands for base)
	roots []string    // further writable roots, relative to base
	// noProtect empties the policy's protect list (default: .git/hooks, .git/config).
	noProtect bool

	// D (mount-relative), where it really is (relative to base; default src/D), and
	// how the fence names entries of D (default D; different when the kernel
	// follows a link it was shown on the way).
	dir, dirHost, seenDir string
	// F (default D/f, which the harness makes at dirHost/f holding "hello"), how the
	// fence names it, where its name is and where its content is (relative to base).
	file, seenFile, nameHost, fileHost string

	v verdict

	// fLink: F is a symlink the mirror shows as a symlink, so link(2) links the
	// symlink itself, judged by its own name, as on the host.
	fLink bool

	makeF bool // F is the harness's D/f
}

var fenceCases = []fenceCase{
	// Allowed: D really is inside a writable root.
	{name: "plain directory", tree: []string{"dir src/a"}, dir: "a", v: all("")},
	{name: "absolute link into the root", tree: []string{"dir src/in", "link src/a -> $BASE/src/in"},
		dir: "a", dirHost: "src/in", seenDir: "in", v: all("")},
	{name: "relative link inside the mount", tree: []string{"dir src/in", "link src/a -> in"},
		dir: "a", dirHost: "src/in", seenDir: "in", v: all("")},
	{name: "deep relative link climbing to the mount root", tree: []string{"dir src/in", "dir src/p/q", "link src/p/q/a -> ../../in"},
		dir: "p/q/a", dirHost: "src/in", seenDir: "in", v: all("")},
	{name: "absolute link to another writable root", tree: []string{"dir extra/d", "link src/a -> $BASE/extra/d"},
		dir: "a", dirHost: "extra/d", v: all("")},
	// A nested root's own name lives in the root around it. Renaming it is still a
	// carrier for the protect entries relative to it (a/.git/hooks, a/.git/config:
	// a is a repository when the policy generation is resolved).
	{name: "writable root nested in the workspace root", tree: []string{"dir src/a/.git"}, roots: []string{"src/a"},
		dir: "a", v: verdict{dname: RuleProtected}},
	{name: "writable root nested in the workspace root, no repository", tree: []string{"dir src/a"}, roots: []string{"src/a"},
		dir: "a", v: all("")},
	{name: "writable root nested in the workspace root, nothing protected", tree: []string{"dir src/a"}, roots: []string{"src/a"},
		noProtect: true, dir: "a", v: all("")},
	{name: "relative link climbing out to another writable root", tree: []string{"dir extra/d", "link src/a -> ../extra/d"},
		dir: "a", dirHost: "extra/d", v: all("")},

	// Denied: D leads out of every writable root.
	{name: "absolute link out", tree: []string{"dir outside/d", "link src/a -> $BASE/outside/d"},
		dir: "a", dirHost: "outside/d", v: leadsOut(RuleOutside)},
	{name: "relative link climbing out", tree: []string{"dir outside/d", "link src/a -> ../outside/d"},
		dir: "a", dirHost: "outside/d", v: leadsOut(RuleOutside)},
	{name: "deep relative link climbing out", tree: []string{"dir outside/d", "link src/p/q/a -> ../../../outside/d"},
		dir: "p/q/a", dirHost: "outside/d", v: leadsOut(RuleOutside)},
	{name: "directory beneath a link out", tree: []string{"dir outside/d/sub", "link src/a -> $BASE/outside/d"},
		dir: "a/sub", dirHost: "outside/d/sub", v: all(RuleOutside)},
	{name: "exposed link to a link out", tree: []string{"dir outside/d", "link src/a -> b", "link src/b -> $BASE/outside/d"},
		dir: "a", dirHost: "outside/d", seenDir: "b", v: leadsOut(RuleOutside)},
	{name: "absolute link whose text climbs out of the root", tree: []string{"dir outside/d", "link src/a -> $BASE/src/../outside/d"},
		dir: "a", dirHost: "outside/d", v: leadsOut(RuleOutside)},
	{name: "relative link climbing through a link out", tree: []string{"dir outside/d", "link src/p -> $BASE/outside/d", "link src/a -> p/.."},
		dir: "a", dirHost: "outside", v: leadsOut(RuleOutside)},

	// Protected paths and the policy file.
	{name: "protected directory", tree: []string{"dir src/.git/hooks"},
		dir: ".git/hooks", v: all(RuleProtected)},
	{name: "protected file and its ancestor", tree: []string{"dir src/.git/hooks", "file src/.git/config [core]"},
		dir: ".git", file: ".git/config",
		v: verdict{dir: "", dname: RuleProtected, name: RuleProtected, replace: RuleProtected, link: RuleProtected, content: RuleProtected, create: RuleProtected}},
	{name: "unprotected file beside protected paths", tree: []string{"dir src/.git/hooks", "file src/.git/config [core]"},
		dir: ".git", v: verdict{dname: RuleProtected}},
	{name: "relative link into a protected directory", tree: []string{"dir src/.git/hooks", "link src/a -> .git/hooks"},
		dir: "a", dirHost: "src/.git/hooks", seenDir: ".git/hooks", v: leadsOut(RuleProtected)},
	{name: "absolute link into a protected directory", tree: []string{"dir src/.git/hooks", "link src/a -> $BASE/src/.git/hooks"},
		dir: "a", dirHost: "src/.git/hooks", seenDir: ".git/hooks", v: leadsOut(RuleProtected)},
	// The git directories of the root (policy.Execution.ProtectedPaths): a linked
	// worktree's gitdir and a submodule's gitdir below the root's .git get the same
	// .git/... entries, and their commondir may not be created.
	{name: "linked worktree gitdir hooks", tree: worktreeTree, dir: ".git/worktrees/wt/hooks", v: all(RuleProtected)},
	{name: "linked worktree gitdir config", tree: worktreeTree, dir: ".git/worktrees/wt", file: ".git/worktrees/wt/config",
		v: verdict{dir: "", dname: RuleProtected, name: RuleProtected, replace: RuleProtected, link: RuleProtected, content: RuleProtected, create: RuleProtected}},
	{name: "unprotected file in a linked worktree gitdir", tree: worktreeTree, dir: ".git/worktrees/wt",
		v: verdict{dname: RuleProtected}},
	{name: "submodule gitdir hooks", tree: submoduleTree, dir: ".git/modules/lib/sub/hooks", v: all(RuleProtected)},
	{name: "submodule gitdir config", tree: submoduleCheckoutTree, dir: ".git/modules/lib/sub", file: ".git/modules/lib/sub/config",
		v: verdict{dir: "", dname: RuleProtected, name: RuleProtected, replace: RuleProtected, link: RuleProtected, content: RuleProtected, create: RuleProtected, dmode: RuleProtected}},
	{name: "unprotected file in a submodule gitdir", tree: submoduleCheckoutTree, dir: ".git/modules/lib/sub",
		v: verdict{dname: RuleProtected, dmode: RuleProtected}},
	// It stays a valid git directory: git refuses a submodule git directory nested
	// in another only while the outer one is valid (review F5, policy.ProtectValid).
	// HEAD is kept but for a rename bringing a valid HEAD (TestSubmoduleHeadSwap);
	// objects/ and refs/ keep their names and modes, and what lies within them
	// stays writable.
	{name: "submodule gitdir HEAD", tree: submoduleCheckoutTree, dir: ".git/modules/lib/sub", file: ".git/modules/lib/sub/HEAD",
		v: verdict{dir: "", dname: RuleProtected, name: RuleProtected, replace: RuleProtected, link: RuleProtected, content: RuleProtected, create: RuleProtected, dmode: RuleProtected}},
	{name: "submodule gitdir objects", tree: submoduleCheckoutTree, dir: ".git/modules/lib/sub/objects",
		v: verdict{dname: RuleProtected, dmode: RuleProtected}},
	{name: "submodule gitdir refs", tree: submoduleCheckoutTree, dir: ".git/modules/lib/sub/refs",
		v: verdict{dname: RuleProtected, dmode: RuleProtected}},
	// One no checkout leads to (deinitialised, or removed upstream) stays whole:
	// writable, a command could break it and plant a git directory inside that git
	// would no longer refuse as nested (review).
	{name: "unprotected file in a stale submodule gitdir", tree: submoduleTree, dir: ".git/modules/lib/sub", v: all(RuleProtected)},
	// The checkout's pointer leads git into that directory: rewritten, git would use
	// one of the command's own (found by review).
	{name: "submodule checkout pointer", tree: submoduleCheckoutTree, dir: "lib/sub", file: "lib/sub/.git",
		v: verdict{dir: "", dname: RuleProtected, name: RuleProtected, replace: RuleProtected, link: RuleProtected, content: RuleProtected, create: RuleProtected}},
	// modules/ gains no entry: git would take one as the git directory of a
	// submodule the user initialises next, hooks included (review F4). Only the
	// submodule git directories in it stay writable (above).
	{name: "not a git directory below modules/", tree: []string{"dir src/.git/modules/junk/hooks", "file src/.git/modules/junk/description x"},
		dir: ".git/modules/junk/hooks", v: all(RuleProtected)},
	{name: "a new entry in modules/", tree: submoduleTree, dir: ".git/modules", v: all(RuleProtected)},
	{name: "a new entry beside a submodule gitdir", tree: submoduleTree, dir: ".git/modules/lib", v: all(RuleProtected)},
	{name: "creating modules/ in a repository", tree: []string{"dir src/.git/hooks", "file src/.git/config [core]"},
		dir: ".git", file: ".git/modules",
		v: verdict{dname: RuleProtected, name: hidden, replace: RuleProtected, link: hidden, content: hidden, create: RuleProtected}},
	// A config anchors a git directory: HEAD can be moved aside, the protected
	// config cannot (policy.isGitDirAt).
	{name: "a submodule gitdir without HEAD", tree: []string{"dir src/.git/hooks", "file src/.git/config [core]",
		"dir src/.git/modules/junk/hooks", "file src/.git/modules/junk/config [core]"},
		dir: ".git/modules/junk/hooks", v: all(RuleProtected)},
	{name: "creating commondir in a repository", tree: []string{"dir src/.git/hooks", "file src/.git/config [core]"},
		dir: ".git", file: ".git/commondir",
		v: verdict{dname: RuleProtected, name: hidden, replace: RuleProtected, link: hidden, content: hidden, create: RuleProtected}},
	{name: "creating commondir where no repository was", tree: []string{"dir src/p/.git"},
		dir: "p/.git", file: "p/.git/commondir", v: verdict{name: hidden, link: hidden, content: hidden}},
	// A repository that is not a root's (git init in a subdirectory) is the run's
	// own; so is one the run creates in a root (TestGitInitInTheRun).
	{name: "repository below the root", tree: []string{"dir src/p/.git/hooks", "file src/p/.git/config [core]"},
		dir: "p/.git/hooks", v: all("")},
	{name: "policy file and its directory", dir: ".toh", file: ".toh/policy.json",
		v: verdict{dir: "", dname: RulePolicyFile, name: RulePolicyFile, replace: RulePolicyFile, link: RulePolicyFile, content: RulePolicyFile, create: RulePolicyFile}},
	{name: "policy lock file", dir: ".toh", file: ".toh/policy.json.lock",
		v: verdict{dir: "", dname: RulePolicyFile, name: RulePolicyFile, replace: RulePolicyFile, link: RulePolicyFile, content: RulePolicyFile, create: RulePolicyFile}},

	// F is not a plain file of D.
	{name: "outside file hard-linked in", tree: []string{"dir src/a", "hardlink src/a/f -> outside/canary"},
		dir: "a", file: "a/f", fileHost: "outside/canary",
		v: verdict{link: RuleMultiplyLinked, content: RuleMultiplyLinked, create: RuleMultiplyLinked}},
	{name: "file hard-linked inside the root", tree: []string{"file src/a/f hello", "hardlink src/a/g -> src/a/f"},
		dir: "a", file: "a/f", v: verdict{link: RuleMultiplyLinked, content: RuleMultiplyLinked, create: RuleMultiplyLinked}},
	{name: "absolute link to an outside file", tree: []string{"dir src/a", "file outside/t hello", "link src/a/f -> $BASE/outside/t"},
		dir: "a", file: "a/f", fileHost: "outside/t",
		v: verdict{link: RuleOutside, content: RuleOutside, create: RuleOutside}},
	{name: "relative link climbing out to a file", tree: []string{"dir src/a", "file outside/t hello", "link src/a/f -> ../../outside/t"},
		dir: "a", file: "a/f", fileHost: "outside/t",
		v: verdict{link: RuleOutside, content: RuleOutside, create: RuleOutside}},
	{name: "absolute link to a protected file", tree: []string{"dir src/a", "file src/.git/config [core]", "link src/a/f -> $BASE/src/.git/config"},
		dir: "a", file: "a/f", fileHost: "src/.git/config", seenFile: ".git/config", fLink: true,
		v: verdict{content: RuleProtected, create: RuleProtected}},
	{name: "absolute link to the policy file", tree: []string{"dir src/a", "link src/a/f -> $BASE/src/.toh/policy.json"},
		dir: "a", file: "a/f", fileHost: "src/.toh/policy.json", seenFile: ".toh/policy.json", fLink: true,
		v: verdict{content: RulePolicyFile, create: RulePolicyFile}},
	{name: "link to a missing protected file", tree: []string{"dir src/a", "dir src/.git/hooks", "link src/a/f -> $BASE/src/.git/hooks/post-commit"},
		dir: "a", file: "a/f", fileHost: "src/.git/hooks/post-commit",
		v: verdict{name: hidden, link: hidden, content: hidden, create: RuleProtected}},
	{name: "link out to nothing", tree: []string{"dir src/a", "link src/a/f -> $BASE/outside/new"},
		dir: "a", file: "a/f", fileHost: "outside/new",
		v: verdict{name: hidden, link: hidden, content: hidden, create: RuleOutside}},
	{name: "link into the root to nothing", tree: []string{"dir src/a", "dir src/in", "link src/a/f -> $BASE/src/in/made"},
		dir: "a", file: "a/f", fileHost: "src/in/made",
		v: verdict{name: hidden, link: hidden, content: hidden, create: ""}},

	// Modes.
	{name: "read-only", mode: policy.ReadOnly, tree: []string{"dir src/a"}, dir: "a", v: all(RuleReadOnly)},
	{name: "danger-full-access through a link out", mode: policy.DangerFullAccess,
		tree: []string{"dir outside/d", "link src/a -> $BASE/outside/d"}, dir: "a", dirHost: "outside/d", v: all("")},
	{name: "danger-full-access in a protected directory", mode: policy.DangerFullAccess,
		tree: []string{"dir src/.git/hooks"}, dir: ".git/hooks", v: all("")},
}

// worktreeTree is a repository in SOURCE with a linked worktree whose gitdir
// (.git/worktrees/wt) lies inside it; submoduleTree one with a submodule lib/sub,
// submoduleCheckoutTree the same with its checkout in SOURCE.
var (
	worktreeTree = []string{
		"file src/.git/HEAD ref: refs/heads/main", "dir src/.git/objects", "dir src/.git/refs", "dir src/.git/hooks",
		"file src/.git/worktrees/wt/HEAD ref: refs/heads/wt", "file src/.git/worktrees/wt/commondir ../..",
		"file src/.git/worktrees/wt/gitdir $BASE/wt/.git", "dir src/.git/worktrees/wt/hooks", "file src/.git/worktrees/wt/config [core]",
	}
	submoduleTree = []string{
		"file src/.git/HEAD ref: refs/heads/main", "dir src/.git/objects", "dir src/.git/refs",
		"file src/.git/modules/lib/sub/HEAD ref: refs/heads/main", "dir src/.git/modules/lib/sub/objects", "dir src/.git/modules/lib/sub/refs",
		"dir src/.git/modules/lib/sub/hooks", "file src/.git/modules/lib/sub/config [core]",
	}
	submoduleCheckoutTree = []string{
		"file src/.git/HEAD ref: refs/heads/main", "dir src/.git/objects", "dir src/.git/refs",
		"file src/.git/modules/lib/sub/HEAD ref: refs/heads/main", "dir src/.git/modules/lib/sub/objects", "dir src/.git/modules/lib/sub/refs",
		"dir src/.git/modules/lib/sub/hooks", "file src/.git/modules/lib/sub/config [core] worktree = ../../../../lib/sub",
		"file src/lib/sub/.git gitdir: ../../.git/modules/lib/sub", "file src/lib/sub/README hello",
	}
)

// withDefaults fills in the derived fields.
func (c fenceCase) withDefaults() fenceCase {
	if c.mode == "" {
		c.mode = policy.WorkspaceWrite
	}
	if c.dirHost == "" {
		c.dirHost = path.Join("src", c.dir)
	}
	if c.seenDir == "" {
		c.seenDir = c.dir
	}
	if c.file == "" {
		c.makeF = true
		c.file = path.Join(c.dir, "f")
		c.seenFile = path.Join(c.seenDir, "f")
		c.nameHost = path.Join(c.dirHost, "f")
	}
	if c.seenFile == "" {
		c.seenFile = c.file
	}
	if c.nameHost == "" {
		c.nameHost = path.Join("src", c.file)
	}
	if c.fileHost == "" {
		c.fileHost = c.nameHost
	}
	return c
}

// fixture is what every case's tree holds besides its own lines.
func (c fenceCase) fixture() []string {
	lines := []string{"dir " + c.dirHost + "/e", "file src/mine mine", "dir src/minedir"}
	if c.makeF {
		lines = append(lines, "file "+c.nameHost+" hello")
	}
	return lines
}

// rule is the case's expected rule for one way of touching it.
func (c fenceCase) rule(class string) string {
	switch class {
	case "dir":
		return c.v.dir
	case "dmode":
		if c.v.dmode != "" {
			return c.v.dmode
		}
		return c.v.dir
	case "dname":
		return c.v.dname
	case "name":
		return c.v.name
	case "replace":
		return c.v.replace
	case "link":
		return c.v.link
	case "content":
		return c.v.content
	case "create":
		return c.v.create
	case "mine": // the harness's own names at the root of SOURCE
		if c.mode == policy.ReadOnly {
			return RuleReadOnly
		}
		return ""
	case "handle": // opening F for writing in danger-full-access
		if c.v.content == RuleMultiplyLinked || c.v.content == hidden {
			return c.v.content
		}
		return ""
	case "readable": // opening F for reading
		if c.v.content == hidden {
			return hidden
		}
		return ""
	case "device":
		if os.Geteuid() != 0 {
			return kernelRefuses
		}
		return RuleDeviceNode
	case "ioctl":
		return RuleIoctl
	}
	panic("unknown class " + class)
}

// touch is one way an operation touches the case, in the order the fence judges
// them, with the audit op and mount-relative path a denial there records.
type touch struct {
	class, op, path string
}

// opRun is one operation on one case's fresh mount.
type opRun struct {
	*env
	c     fenceCase
	fd    int   // a descriptor opened by prepare
	mtime int64 // F's mtime before the operation
}

func (x *opRun) host(rel string) string { return filepath.Join(x.base, rel) }

type fenceOp struct {
	name    string
	touches func(c fenceCase) []touch
	// prepare opens what run writes through; it runs before the host is recorded
	// and may switch the policy (the policy file itself is then left out of the
	// comparison).
	prepare func(x *opRun) error
	run     func(x *opRun) error
	landed  func(x *opRun) error // the positive control
}

// inD, onF and so on build touches.
func inD(class, op, name string) func(c fenceCase) []touch {
	return func(c fenceCase) []touch { return []touch{{class, op, path.Join(c.seenDir, name)}} }
}

func onF(class, op string) func(c fenceCase) []touch {
	return func(c fenceCase) []touch { return []touch{{class, op, c.seenFile}} }
}

// fenceOps lists every mutating operation, aimed at a case's D and F.
func fenceOps() []fenceOp {
	d := func(x *opRun, name string) string { return x.m(path.Join(x.c.dir, name)) }
	f := func(x *opRun) string { return x.m(x.c.file) }
	dh := func(x *opRun, name string) string { return x.host(path.Join(x.c.dirHost, name)) }
	content := func(s string) func(x *opRun) error {
		return func(x *opRun) error { return want(x.host(x.c.fileHost), unix.S_IFREG|0o644, s) }
	}
	// handle opens F for writing in danger-full-access and goes back to the case's
	// mode: writes through it are judged again (recheck) under the case's policy.
	handle := func(x *opRun) error {
		if err := policy.SetMode(x.policy, "", policy.DangerFullAccess); err != nil {
			x.t.Fatal(err)
		}
		fd, openErr := unix.Open(f(x), unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err := policy.SetMode(x.policy, "", x.c.mode); err != nil {
			x.t.Fatal(err)
		}
		if openErr == nil {
			x.fd = fd
			x.t.Cleanup(func() { unix.Close(fd) })
		}
		return openErr
	}
	handleOp := func(op string) func(c fenceCase) []touch {
		return func(c fenceCase) []touch {
			return []touch{{"handle", "open", c.seenFile}, {"content", op, c.seenFile}}
		}
	}
	chownTo := func() (int, int) {
		if os.Geteuid() == 0 {
			return 1001, 1002
		}
		return os.Getuid(), os.Getgid() // an ordinary user can only chown to itself
	}

	return []fenceOp{
		{name: "create", touches: inD("dir", "create", "new"),
			run:    func(x *opRun) error { return writeAt(d(x, "new"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, "new") },
			landed: func(x *opRun) error { return want(dh(x, "new"), unix.S_IFREG|0o644, "new") }},
		{name: "mknod fifo", touches: inD("dir", "mknod", "fifo"),
			run:    func(x *opRun) error { return unix.Mknod(d(x, "fifo"), unix.S_IFIFO|0o640, 0) },
			landed: func(x *opRun) error { return want(dh(x, "fifo"), unix.S_IFIFO|0o640, "") }},
		{name: "mknod device", touches: inD("device", "mknod", "null"),
			run: func(x *opRun) error { return unix.Mknod(d(x, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) }},
		{name: "mkdir", touches: inD("dir", "mkdir", "newdir"),
			run:    func(x *opRun) error { return unix.Mkdir(d(x, "newdir"), 0o750) },
			landed: func(x *opRun) error { return want(dh(x, "newdir"), unix.S_IFDIR|0o750, "") }},
		{name: "symlink", touches: inD("dir", "symlink", "sl"),
			run:    func(x *opRun) error { return unix.Symlink("f", d(x, "sl")) },
			landed: func(x *opRun) error { return want(dh(x, "sl"), unix.S_IFLNK|0o777, "f") }},
		{name: "link",
			touches: func(c fenceCase) []touch {
				if c.fLink {
					return []touch{{"link", "link", c.file}, {"dir", "link", path.Join(c.seenDir, "hl")}}
				}
				return []touch{{"link", "link", c.seenFile}, {"dir", "link", path.Join(c.seenDir, "hl")}}
			},
			run: func(x *opRun) error { return unix.Link(f(x), d(x, "hl")) },
			landed: func(x *opRun) error {
				if x.c.fLink {
					return sameInode(dh(x, "hl"), x.host(x.c.nameHost))
				}
				return sameInode(dh(x, "hl"), x.host(x.c.fileHost))
			}},
		{name: "unlink", touches: onF("name", "unlink"),
			run:    func(x *opRun) error { return unix.Unlink(f(x)) },
			landed: func(x *opRun) error { return absent(x.host(x.c.nameHost)) }},
		{name: "rmdir", touches: inD("dir", "rmdir", "e"),
			run:    func(x *opRun) error { return unix.Rmdir(d(x, "e")) },
			landed: func(x *opRun) error { return absent(dh(x, "e")) }},
		{name: "rename into D",
			touches: func(c fenceCase) []touch {
				return []touch{{"mine", "rename", "mine"}, {"dir", "rename", path.Join(c.seenDir, "x")}}
			},
			run: func(x *opRun) error { return unix.Rename(x.m("mine"), d(x, "x")) },
			landed: func(x *opRun) error {
				return errors.Join(absent(x.s("mine")), want(dh(x, "x"), unix.S_IFREG|0o644, "mine"))
			}},
		{name: "rename into D with RENAME_NOREPLACE",
			touches: func(c fenceCase) []touch {
				return []touch{{"mine", "rename", "mine"}, {"dir", "rename", path.Join(c.seenDir, "x")}}
			},
			run: func(x *opRun) error {
				return unix.Renameat2(unix.AT_FDCWD, x.m("mine"), unix.AT_FDCWD, d(x, "x"), unix.RENAME_NOREPLACE)
			},
			landed: func(x *opRun) error {
				return errors.Join(absent(x.s("mine")), want(dh(x, "x"), unix.S_IFREG|0o644, "mine"))
			}},
		{name: "rename F out of D",
			touches: func(c fenceCase) []touch { return []touch{{"name", "rename", c.seenFile}, {"mine", "rename", "moved"}} },
			run:     func(x *opRun) error { return unix.Rename(f(x), x.m("moved")) },
			landed:  func(x *opRun) error { return errors.Join(absent(x.host(x.c.nameHost)), exists(x.s("moved"))) }},
		{name: "rename F within D",
			touches: func(c fenceCase) []touch {
				return []touch{{"name", "rename", c.seenFile}, {"dir", "rename", path.Join(c.seenDir, "f2")}}
			},
			run:    func(x *opRun) error { return unix.Rename(f(x), d(x, "f2")) },
			landed: func(x *opRun) error { return errors.Join(absent(x.host(x.c.nameHost)), exists(dh(x, "f2"))) }},
		{name: "rename over F",
			touches: func(c fenceCase) []touch {
				return []touch{{"mine", "rename", "mine"}, {"replace", "rename", c.seenFile}}
			},
			run: func(x *opRun) error { return unix.Rename(x.m("mine"), f(x)) },
			landed: func(x *opRun) error {
				return errors.Join(absent(x.s("mine")), want(x.host(x.c.nameHost), unix.S_IFREG|0o644, "mine"))
			}},
		{name: "exchange F with a file",
			touches: func(c fenceCase) []touch { return []touch{{"name", "rename", c.seenFile}, {"mine", "rename", "mine"}} },
			run: func(x *opRun) error {
				return unix.Renameat2(unix.AT_FDCWD, f(x), unix.AT_FDCWD, x.m("mine"), unix.RENAME_EXCHANGE)
			},
			landed: func(x *opRun) error {
				return errors.Join(want(x.host(x.c.nameHost), unix.S_IFREG|0o644, "mine"), exists(x.s("mine")))
			}},
		{name: "exchange a file with F",
			touches: func(c fenceCase) []touch { return []touch{{"mine", "rename", "mine"}, {"name", "rename", c.seenFile}} },
			run: func(x *opRun) error {
				return unix.Renameat2(unix.AT_FDCWD, x.m("mine"), unix.AT_FDCWD, f(x), unix.RENAME_EXCHANGE)
			},
			landed: func(x *opRun) error {
				return errors.Join(want(x.host(x.c.nameHost), unix.S_IFREG|0o644, "mine"), exists(x.s("mine")))
			}},
		{name: "rename D away",
			touches: func(c fenceCase) []touch { return []touch{{"dname", "rename", c.dir}, {"mine", "rename", "moved"}} },
			run:     func(x *opRun) error { return unix.Rename(x.m(x.c.dir), x.m("moved")) },
			landed:  func(x *opRun) error { return errors.Join(absent(x.s(x.c.dir)), exists(x.s("moved"))) }},
		{name: "exchange a directory with D",
			touches: func(c fenceCase) []touch { return []touch{{"mine", "rename", "minedir"}, {"dname", "rename", c.dir}} },
			run: func(x *opRun) error {
				return unix.Renameat2(unix.AT_FDCWD, x.m("minedir"), unix.AT_FDCWD, x.m(x.c.dir), unix.RENAME_EXCHANGE)
			},
			landed: func(x *opRun) error { return errors.Join(emptyDir(x.s(x.c.dir)), exists(x.s("minedir"))) }},
		{name: "open O_WRONLY and write", touches: onF("content", "open"),
			run:    func(x *opRun) error { return writeAt(f(x), unix.O_WRONLY, "J") },
			landed: content("Jello")},
		{name: "open O_WRONLY|O_APPEND and write", touches: onF("content", "open"),
			run:    func(x *opRun) error { return writeAt(f(x), unix.O_WRONLY|unix.O_APPEND, "!") },
			landed: content("hello!")},
		{name: "open O_WRONLY|O_TRUNC", touches: onF("content", "open"),
			run:    func(x *opRun) error { return openClose(f(x), unix.O_WRONLY|unix.O_TRUNC) },
			landed: content("")},
		{name: "open O_RDONLY|O_TRUNC", touches: onF("content", "open"),
			run:    func(x *opRun) error { return openClose(f(x), unix.O_RDONLY|unix.O_TRUNC) },
			landed: content("")},
		{name: "open O_CREAT and write",
			touches: func(c fenceCase) []touch {
				op := "open" // F exists: the kernel sends OPEN
				if c.v.content == hidden {
					op = "create" // a hidden link: the kernel sends CREATE for its name
				}
				return []touch{{"create", op, c.seenFile}}
			},
			run: func(x *opRun) error { return writeAt(f(x), unix.O_CREAT|unix.O_WRONLY, "C") },
			landed: func(x *opRun) error {
				if x.c.v.content == hidden {
					return content("C")(x)
				}
				return content("Cello")(x)
			}},
		{name: "truncate", touches: onF("content", "truncate"),
			run:    func(x *opRun) error { return unix.Truncate(f(x), 1) },
			landed: content("h")},
		{name: "chmod", touches: onF("content", "chmod"),
			run:    func(x *opRun) error { return unix.Chmod(f(x), 0o600) },
			landed: func(x *opRun) error { return want(x.host(x.c.fileHost), unix.S_IFREG|0o600, "hello") }},
		{name: "chown", touches: onF("content", "chown"),
			run: func(x *opRun) error { u, g := chownTo(); return unix.Chown(f(x), u, g) },
			landed: func(x *opRun) error {
				u, g := chownTo()
				return owner(x.host(x.c.fileHost), uint32(u), uint32(g))
			}},
		{name: "chmod D", touches: func(c fenceCase) []touch { return []touch{{"dmode", "chmod", c.seenDir}} },
			run:    func(x *opRun) error { return unix.Chmod(x.m(x.c.dir), 0o700) },
			landed: func(x *opRun) error { return want(x.host(x.c.dirHost), unix.S_IFDIR|0o700, "") }},
		{name: "chmod the mount root", touches: func(c fenceCase) []touch { return []touch{{"mine", "chmod", "."}} },
			run:    func(x *opRun) error { return unix.Chmod(x.mnt, 0o700) },
			landed: func(x *opRun) error { return want(x.src, unix.S_IFDIR|0o700, "") }},
		{name: "utimes", touches: onF("content", "utimes"),
			run:    func(x *opRun) error { return unix.UtimesNano(f(x), []unix.Timespec{{Sec: 1}, {Sec: 2}}) },
			landed: func(x *opRun) error { return mtime(x.host(x.c.fileHost), 2) }},
		{name: "utimes now", touches: onF("content", "utimes"),
			run: func(x *opRun) error {
				var st unix.Stat_t
				unix.Lstat(x.host(x.c.fileHost), &st)
				x.mtime = st.Mtim.Nano()
				return unix.UtimesNanoAt(unix.AT_FDCWD, f(x), nil, 0)
			},
			landed: func(x *opRun) error {
				var st unix.Stat_t
				if err := unix.Lstat(x.host(x.c.fileHost), &st); err != nil {
					return err
				}
				if st.Mtim.Nano() <= x.mtime {
					return fmt.Errorf("mtime %d, want later than %d", st.Mtim.Nano(), x.mtime)
				}
				return nil
			}},
		{name: "setxattr", touches: onF("content", "setxattr"),
			run:    func(x *opRun) error { return unix.Setxattr(f(x), "user.new", []byte("1"), 0) },
			landed: func(x *opRun) error { return xattr(x.host(x.c.fileHost), "user.new", "1") }},
		{name: "removexattr", touches: onF("content", "removexattr"),
			run:    func(x *opRun) error { return unix.Removexattr(f(x), "user.pre") },
			landed: func(x *opRun) error { return noXattr(x.host(x.c.fileHost), "user.pre") }},
		{name: "write through an open descriptor", touches: handleOp("write"), prepare: handle,
			run:    func(x *opRun) error { _, err := unix.Pwrite(x.fd, []byte("J"), 0); return err },
			landed: content("Jello")},
		{name: "ftruncate", touches: handleOp("truncate"), prepare: handle,
			run:    func(x *opRun) error { return unix.Ftruncate(x.fd, 1) },
			landed: content("h")},
		{name: "fallocate", touches: handleOp("fallocate"), prepare: handle,
			run:    func(x *opRun) error { return unix.Fallocate(x.fd, 0, 0, 8192) },
			landed: func(x *opRun) error { return size(x.host(x.c.fileHost), 8192) }},
		{name: "copy_file_range", touches: handleOp("copy_file_range"), prepare: handle,
			run: func(x *opRun) error {
				src, err := unix.Open(x.m("mine"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					return fmt.Errorf("opening the source: %w", err)
				}
				defer unix.Close(src)
				var off int64
				n, err := unix.CopyFileRange(src, nil, x.fd, &off, 4, 0)
				if err == nil && n != 4 {
					err = fmt.Errorf("copied %d bytes, want 4", n)
				}
				return err
			},
			landed: content("mineo")},
		{name: "ioctl FS_IOC_SETFLAGS",
			touches: func(c fenceCase) []touch {
				return []touch{{"readable", "open", c.seenFile}, {"ioctl", "ioctl", c.seenFile}}
			},
			run: func(x *opRun) error {
				fd, err := unix.Open(f(x), unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				flags := 0
				if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_SETFLAGS, uintptr(unsafe.Pointer(&flags))); errno != 0 {
					return errno
				}
				return nil
			}},
	}
}

// outcomes counts, per operation, the cases that allowed, denied or hid it.
type outcomes struct{ allowed, denied, hidden, refused atomic.Int32 }

// TestFenceCases crosses every fence case with every mutating operation, and
// checks that every operation met at least one case that denies it and, unless the
// fence denies it always, one that allows it: each has a negative and a positive
// control.
func TestFenceCases(t *testing.T) {
	testutil.RequireFUSE(t)
	ops := fenceOps()
	tally := map[string]*outcomes{}
	for _, op := range ops {
		tally[op.name] = &outcomes{}
	}
	var ran atomic.Int32
	t.Cleanup(func() {
		if int(ran.Load()) != len(fenceCases)*len(ops) {
			return // -run chose a subset
		}
		for _, op := range ops {
			o := tally[op.name]
			t.Logf("%-36s allowed in %2d cases, denied in %2d, hidden in %d, refused by the kernel in %d",
				op.name, o.allowed.Load(), o.denied.Load(), o.hidden.Load(), o.refused.Load())
			if o.denied.Load()+o.refused.Load() == 0 || (op.landed != nil && o.allowed.Load() == 0) {
				t.Errorf("%s: no negative or no positive control among the cases", op.name)
			}
		}
	})
	for _, c := range fenceCases {
		c := c.withDefaults()
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, op := range ops {
				t.Run(op.name, func(t *testing.T) {
					ran.Add(1)
					runFenceCase(t, c, op, tally[op.name])
				})
			}
		})
	}
}

func runFenceCase(t *testing.T, c fenceCase, op fenceOp, tally *outcomes) {
	e := newEnv(t, c.mode, append(append([]string{}, c.tree...), c.fixture()...)...)
	if _, err := os.Lstat(filepath.Join(e.base, c.fileHost)); err == nil {
		if err := unix.Setxattr(filepath.Join(e.base, c.fileHost), "user.pre", []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.roots) > 0 || c.noProtect {
		if err := policy.Update(e.policy, func(f *policy.File) error {
			for _, r := range c.roots {
				f.WritableRoots = append(f.WritableRoots, filepath.Join(e.base, r))
			}
			if c.noProtect {
				f.Protect = &[]string{}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	x := &opRun{env: e, c: c, fd: -1}

	// The expected outcome: the first touch the case denies, in the fence's order.
	var deny *touch
	for _, tc := range op.touches(c) {
		if c.rule(tc.class) != "" {
			deny = &tc
			break
		}
	}

	before := e.hostState()
	var err error
	if op.prepare != nil {
		err = op.prepare(x)
	}
	if err == nil {
		err = op.run(x)
	}
	after := e.hostState()
	if op.prepare != nil {
		// prepare switched the policy: its file and directory changed.
		for _, p := range []string{"src/.toh", "src/.toh/policy.json", "src/.toh/policy.json.lock"} {
			delete(before, p)
			delete(after, p)
		}
	}

	switch {
	case deny == nil: // positive control
		tally.allowed.Add(1)
		if err != nil {
			t.Fatalf("allowed, but failed: %v", err)
		}
		if op.landed == nil {
			t.Fatalf("the operation has no positive control")
		}
		if err := op.landed(x); err != nil {
			t.Errorf("allowed, but did not land: %v", err)
		}
		skip := ""
		if strings.HasPrefix(c.dirHost, "outside/") {
			skip = c.dirHost // danger-full-access lands there by design
		}
		if d := diff(canaries(before, skip), canaries(after, skip)); d != "" {
			t.Errorf("changed the canaries outside:\n%s", d)
		}
		if recs := e.records(); len(recs) != 0 {
			t.Errorf("allowed, but logged denials: %+v", recs)
		}
	case c.rule(deny.class) == hidden:
		tally.hidden.Add(1)
		if !errors.Is(err, unix.ENOENT) {
			t.Errorf("on a hidden name: %v, want ENOENT", err)
		}
		if d := diff(before, after); d != "" {
			t.Errorf("changed the host:\n%s", d)
		}
		if recs := e.records(); len(recs) != 0 {
			t.Errorf("logged denials for a hidden name: %+v", recs)
		}
	case c.rule(deny.class) == kernelRefuses:
		tally.refused.Add(1)
		if !errors.Is(err, unix.EPERM) {
			t.Errorf("refused by the kernel: %v, want EPERM", err)
		}
		if d := diff(before, after); d != "" {
			t.Errorf("changed the host:\n%s", d)
		}
		if recs := e.records(); len(recs) != 0 {
			t.Errorf("logged denials for what the kernel refused: %+v", recs)
		}
	default: // negative control
		tally.denied.Add(1)
		e.expectDenial("denied", err, deny.op, c.rule(deny.class), deny.path)
		if d := diff(before, after); d != "" {
			t.Errorf("denied, but changed the host:\n%s", d)
		}
	}

	// Whatever happened, the mount shows F as SOURCE has it: no page the kernel
	// kept from a denied write, no stale size or name after an allowed change.
	// (Not after prepare, which replaced the policy file outside the mount.)
	if op.prepare == nil {
		want, errH := os.ReadFile(filepath.Join(e.src, c.file))
		got, errM := os.ReadFile(x.m(c.file))
		// A shown symlink that was just hard-linked is shown as what it leads to: the
		// kernel, told ESTALE by Readlink while it still holds the link, looks it up
		// again at once.
		switch {
		case errH == nil && (errM != nil || string(got) != string(want)):
			t.Errorf("the mount shows F as %q (%v), SOURCE has %q", got, errM, want)
		case errors.Is(errH, os.ErrNotExist) && !errors.Is(errM, os.ErrNotExist):
			t.Errorf("the mount shows F as %q (%v), SOURCE has none", got, errM)
		}
	}
}

// canaries is the outside part of a host state, except the subtree skip, without
// the link count and ctime: an allowed rename or unlink of a hard link to a canary
// changes those, never its content, inode, size, mtime, mode, owner or xattrs.
func canaries(state map[string]entry, skip string) map[string]entry {
	out := map[string]entry{}
	for p, en := range state {
		if !strings.HasPrefix(p, "outside/") || (skip != "" && (p == skip || strings.HasPrefix(p, skip+"/"))) {
			continue
		}
		en.Nlink, en.Ctime = 0, 0
		out[p] = en
	}
	return out
}

func exists(path string) error {
	_, err := os.Lstat(path)
	return err
}

func sameInode(a, b string) error {
	var sa, sb unix.Stat_t
	if err := errors.Join(unix.Lstat(a, &sa), unix.Lstat(b, &sb)); err != nil {
		return err
	}
	if sa.Ino != sb.Ino {
		return fmt.Errorf("%s is inode %d, %s inode %d; want one", a, sa.Ino, b, sb.Ino)
	}
	return nil
}

func emptyDir(path string) error {
	ents, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	if len(ents) != 0 {
		return fmt.Errorf("%s holds %d entries, want none", path, len(ents))
	}
	return nil
}

func size(path string, n int64) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	if st.Size != n {
		return fmt.Errorf("%s: size %d, want %d", path, st.Size, n)
	}
	return nil
}

// TestNestedWritableRootRemovable: a writable root nested in another one (a build
// directory listed in writableRoots inside the workspace) can be removed through
// the mount, "rm -rf build" included: its own name lives in the root around it.
func TestNestedWritableRootRemovable(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "file src/build/obj/x.o x")
	if err := policy.Update(e.policy, func(f *policy.File) error {
		f.WritableRoots = append(f.WritableRoots, e.s("build"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	out := treeState(t, e.outside)
	if err := os.RemoveAll(e.m("build")); err != nil {
		t.Fatalf("rm -rf of a nested writable root: %v", err)
	}
	if err := absent(e.s("build")); err != nil {
		t.Error(err)
	}
	if d := diff(out, treeState(t, e.outside)); d != "" {
		t.Errorf("changed the canaries:\n%s", d)
	}
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("logged denials: %+v", recs)
	}
}

// TestGitInitInTheRun: the git rule of policy.Execution.ProtectedPaths is that
// entries under .git/ apply to git directories that exist when the policy generation
// is resolved. A repository the run creates in a root where there was none is the
// run's own: git init may write its hooks and config. From the next generation on
// (or once it is older than the bound: TestNewRepositoryProtectedAfterTheBound) it
// is a git directory of the root like any other.
func TestGitInitInTheRun(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite)
	for _, d := range []string{".git", ".git/hooks"} {
		if err := os.Mkdir(e.m(d), 0o755); err != nil {
			t.Fatalf("mkdir %s in a workspace without a repository: %v", d, err)
		}
	}
	for _, f := range []string{".git/config", ".git/hooks/pre-commit"} {
		if err := writeAt(e.m(f), unix.O_CREAT|unix.O_WRONLY, "[core]"); err != nil {
			t.Fatalf("create %s in a repository the run made: %v", f, err)
		}
		if err := want(e.s(f), unix.S_IFREG|0o644, "[core]"); err != nil {
			t.Errorf("create %s did not land: %v", f, err)
		}
	}
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("git init logged denials: %+v", recs)
	}

	// A new generation sees the repository.
	for _, m := range []policy.Mode{policy.ReadOnly, policy.WorkspaceWrite} {
		if err := policy.SetMode(e.policy, "", m); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{".git/config", ".git/hooks/pre-commit"} {
		err := e.unchanged("write "+f, func() error { return writeAt(e.m(f), unix.O_WRONLY|unix.O_TRUNC, "x") })
		e.expectDenial("write "+f+" in the next generation", err, "open", RuleProtected, f)
	}
	if err := writeAt(e.m(".git/description"), unix.O_CREAT|unix.O_WRONLY, "d"); err != nil {
		t.Errorf("create .git/description in the next generation: %v", err)
	}
}
