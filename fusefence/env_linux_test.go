package fusefence

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// env is one mounted fence for a test:
//
//	base/src              SOURCE, the workspace root
//	base/src/.toh/policy.json  the policy file, inside the root so its guard is exercised
//	base/mnt              the mount point
//	base/outside          canaries: in no writable root (/var/tmp is not one; /tmp is)
//	base/extra            a second writable root (policy writableRoots), outside SOURCE
//	base/cfg              the audit log
//
// It runs as root (allow_other, default_permissions, as toh-mount mounts) or as an
// ordinary user with access to /dev/fuse (through fusermount3, visible to that user
// only).
type env struct {
	t         *testing.T
	base      string
	src       string
	mnt       string
	outside   string
	extra     string
	policy    string
	auditPath string
	audit     *AuditLog
	fence     *Fence
	seen      int           // audit records already checked
	timeout   time.Duration // Config.Timeout (0: DefaultTimeout)

	logMu sync.Mutex
	logs  []string // what the fence logged
}

// logged returns what the fence logged so far.
func (e *env) logged() []string {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	return slices.Clone(e.logs)
}

// newEnv builds the tree (MakeTree notation, relative to base; "$BASE" in a line
// stands for base, for absolute symlink targets), writes a policy
// with the given mode and workspace root base/src, and mounts base/src.
//
// The mount is served by this process: a test must never take a page fault on a
// file of it (mmap), which can deadlock the process against its own garbage
// collector; map files in a helper process (TestMmapWriteHelperProcess).
func newEnv(t *testing.T, mode policy.Mode, tree ...string) *env {
	t.Helper()
	return newEnvTimeout(t, mode, 0, tree...)
}

// newEnvTimeout is newEnv with the mount's Config.Timeout.
func newEnvTimeout(t *testing.T, mode policy.Mode, timeout time.Duration, tree ...string) *env {
	t.Helper()
	testutil.RequireFUSE(t)
	base, err := os.MkdirTemp("/var/tmp", "toh-fence-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	e := &env{
		t: t, base: base,
		src:       filepath.Join(base, "src"),
		mnt:       filepath.Join(base, "mnt"),
		outside:   filepath.Join(base, "outside"),
		extra:     filepath.Join(base, "extra"),
		policy:    filepath.Join(base, "src", ".toh", "policy.json"),
		auditPath: filepath.Join(base, "cfg", "audit.jsonl"),
		timeout:   timeout,
	}
	testutil.MakeTree(t, base, "dir src/.toh", "dir mnt", "dir cfg", "dir extra", "file outside/canary precious")
	for _, line := range tree {
		testutil.MakeTree(t, base, strings.ReplaceAll(line, "$BASE", base))
	}
	if err := policy.Update(e.policy, func(f *policy.File) error {
		f.Mode, f.WorkspaceRoot, f.WritableRoots = mode, e.src, []string{e.extra}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.mount()
	return e
}

// mount mounts e.src on e.mnt. TOH_FUSE_DEBUG=1 logs every FUSE request through
// t.Logf, so a failing test shows the requests that led to its failure.
func (e *env) mount() {
	t := e.t
	t.Helper()
	w, err := policy.NewWatcher(e.policy, policy.Request{Cwd: e.src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.audit, err = OpenAudit(e.auditPath); err != nil {
		t.Fatal(err)
	}
	e.fence, err = Mount(Config{Source: e.src, Mountpoint: e.mnt, Policy: w, Audit: e.audit, AllowOther: os.Geteuid() == 0, Timeout: e.timeout, Debug: os.Getenv("TOH_FUSE_DEBUG") != "",
		Logf: func(format string, args ...any) {
			t.Logf("fence: "+format, args...)
			e.logMu.Lock()
			e.logs = append(e.logs, fmt.Sprintf(format, args...))
			e.logMu.Unlock()
		}})
	if err != nil {
		e.audit.Close()
		t.Fatal(err)
	}
	t.Cleanup(e.unmount)
}

func (e *env) unmount() {
	if e.fence == nil {
		return
	}
	// A mount namespace made while this mount existed holds a copy of it (a bwrap
	// sandbox of another package's tests, run in parallel), and the unmount waits
	// for the copy's requests until that namespace ends. A bwrap 0.8 sandbox whose
	// starter was killed at the wrong moment never ends (its pid 1 waits for a
	// handshake forever): a CI run hung here for ten minutes. After a grace period
	// the connection is aborted, as toh-mount's Stop does, and the test goes on.
	done := make(chan error, 1)
	go func() { done <- e.fence.Unmount() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		e.t.Logf("unmount of %s still waiting after 20s: a copy of the mount lives in another mount namespace; aborting the connection", e.mnt)
		if aerr := abortConnection(e.fence.f.ownDev.Load()); aerr != nil {
			e.t.Errorf("aborting the connection: %v", aerr)
		}
		err = <-done
	}
	if err != nil {
		e.t.Errorf("unmount: %v; detaching", err)
		Unmount(e.mnt, true)
	}
	e.fence = nil
	if err := e.audit.Close(); err != nil {
		e.t.Errorf("audit log: %v", err)
	}
}

// m and s name a path in the mount and in SOURCE.
func (e *env) m(rel string) string { return filepath.Join(e.mnt, rel) }
func (e *env) s(rel string) string { return filepath.Join(e.src, rel) }

// records returns the audit records logged since the last call.
func (e *env) records() []Record {
	e.t.Helper()
	if err := e.audit.Sync(); err != nil {
		e.t.Fatal(err)
	}
	f, err := os.Open(e.auditPath)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	var all []Record
	if err := ReadAudit(f, func(r Record) error { all = append(all, r); return nil }); err != nil {
		e.t.Fatal(err)
	}
	news := all[e.seen:]
	e.seen = len(all)
	return news
}

// expectDenial checks that err is EACCES and that exactly one audit record with
// this op, rule and path was logged for it.
func (e *env) expectDenial(what string, err error, op, rule, path string) {
	e.t.Helper()
	if !errors.Is(err, unix.EACCES) {
		e.t.Errorf("%s: got %v, want EACCES", what, err)
	}
	recs := e.records()
	if len(recs) != 1 || recs[0].Op != op || recs[0].Rule != rule || recs[0].Path != path {
		e.t.Errorf("%s: audit records %+v, want one {op %s, rule %s, path %s}", what, recs, op, rule, path)
		return
	}
	r := recs[0]
	if r.Time.IsZero() || r.HostPath == "" || (rule != RulePolicyInvalid && r.Mode == "") {
		e.t.Errorf("%s: incomplete audit record %+v", what, r)
	}
}

// refusedAs checks that what the caller uid just did was refused by the fence
// with rule at the mount-relative path: at least one audit record since the last
// call, every one of them of that rule, path, uid and op, with a mode.
func (e *env) refusedAs(uid uint32, what, rule, path, op string) {
	e.t.Helper()
	recs := e.records()
	if len(recs) == 0 {
		e.t.Errorf("%s: no audit record, want {rule %s, path %s, op %s}", what, rule, path, op)
	}
	for _, r := range recs {
		if r.Rule != rule || r.Path != path || r.UID != uid || r.Op != op || r.Mode == "" || r.HostPath == "" {
			e.t.Errorf("%s: audit record %+v, want {rule %s, path %s, uid %d, op %s} with its mode and host path", what, r, rule, path, uid, op)
		}
	}
}

// noRecords checks that nothing was denied since the last call to records.
func (e *env) noRecords(what string) {
	e.t.Helper()
	if recs := e.records(); len(recs) != 0 {
		e.t.Errorf("control: %s: audit records %+v, want none", what, recs)
	}
}

// entry is what a tree snapshot records of one path. atime is left out: reads
// through the mount may change it.
type entry struct {
	Mode         uint32
	Ino, Nlink   uint64
	Uid, Gid     uint32
	Size         int64
	Mtime, Ctime int64
	Content      string // regular files; symlink text
	Xattrs       string
}

func (en entry) String() string {
	c := en.Content
	if len(c) > 40 {
		c = c[:40] + "..."
	}
	return fmt.Sprintf("{mode %o ino %d nlink %d owner %d:%d size %d mtime %d ctime %d content %q xattrs %q}",
		en.Mode, en.Ino, en.Nlink, en.Uid, en.Gid, en.Size, en.Mtime, en.Ctime, c, en.Xattrs)
}

// treeState records every path under root, without following symlinks.
func treeState(t *testing.T, root string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		en := entry{Mode: st.Mode, Ino: st.Ino, Nlink: uint64(st.Nlink), Uid: st.Uid, Gid: st.Gid, Size: st.Size,
			Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			en.Content = string(b)
		case unix.S_IFLNK:
			en.Content, _ = os.Readlink(p)
		}
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(p, buf); err == nil {
			names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
			slices.Sort(names)
			en.Xattrs = strings.Join(names, ",")
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = en
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// diff describes how two snapshots differ, "" if they do not.
func diff(before, after map[string]entry) string {
	var b bytes.Buffer
	for p, x := range before {
		y, ok := after[p]
		switch {
		case !ok:
			fmt.Fprintf(&b, "  %s: removed\n", p)
		case x != y:
			fmt.Fprintf(&b, "  %s: %+v -> %+v\n", p, x, y)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			fmt.Fprintf(&b, "  %s: created\n", p)
		}
	}
	return b.String()
}

// hostState records SOURCE, the canaries outside and the second writable root,
// keyed by path relative to base.
func (e *env) hostState() map[string]entry {
	e.t.Helper()
	all := map[string]entry{}
	for _, dir := range []string{"src", "outside", "extra"} {
		for p, en := range treeState(e.t, filepath.Join(e.base, dir)) {
			all[filepath.Join(dir, p)] = en
		}
	}
	return all
}

// unchanged runs op and checks that neither SOURCE, nor the outside canaries, nor
// the second writable root changed: the negative control of every denial.
func (e *env) unchanged(what string, op func() error) error {
	e.t.Helper()
	before := e.hostState()
	err := op()
	if d := diff(before, e.hostState()); d != "" {
		e.t.Errorf("%s changed the host:\n%s", what, d)
	}
	return err
}
