package fusefence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/fusefence/noopendir"
	"github.com/toh-sandbox/toh/policy"
)

// PolicySource yields the execution policy in force right now; *policy.Watcher is
// one. gen must change whenever the returned policy may differ; err non-nil means
// the policy is unusable and every mutation is denied.
type PolicySource interface {
	Current() (x policy.Execution, gen uint64, err error)
}

// Config describes one fence.
type Config struct {
	// Source is the host directory mirrored; it is canonicalized once, at Mount.
	Source string
	// Mountpoint is where the mirror appears.
	Mountpoint string
	// Policy is consulted at every mutation.
	Policy PolicySource
	// Audit receives one event per denial; nil discards them.
	Audit *AuditLog
	// AllowOther lets users other than the one mounting see the mount; it always
	// comes with default_permissions, so the kernel checks each caller's permission
	// bits before the fence is asked. Needs root or user_allow_other in
	// /etc/fuse.conf.
	AllowOther bool
	// Timeout is the kernel's entry, attribute and negative-entry cache lifetime:
	// the staleness bound for changes made to Source from outside. 0 means
	// DefaultTimeout; a negative value disables caching.
	Timeout time.Duration
	// Debug logs every FUSE request and every denial through Logf.
	Debug bool
	// Logf receives diagnostics; nil discards them.
	Logf func(format string, args ...any)
	// OnDeny, when set, is called with every denial, synchronously inside the FUSE
	// request that was denied and before the request is answered: when a caller sees
	// EACCES, its record has been delivered. It must be quick and must not touch the
	// mount.
	OnDeny func(Event)
	// Admit, when set, says whether the fence acts for a caller, named by the
	// thread ID the kernel gives with each request: a mutation by a caller it
	// refuses fails with EACCES and leaves no record (the mutation is not the
	// served party's, nor is its refusal). Reads are never refused: they are
	// allowed everywhere. toh-exec --fence sets it for a caller other than root,
	// whose fences exist on the host for a moment where other processes of the
	// same user, confined runs among them, could reach them (internal/fencerun).
	Admit func(tid uint32) bool
	// Guard are files kept read-only besides the policy's protected paths, with
	// rule protected (toh-exec --fence: its probe cache, which the runner keeps
	// read-only, but which a link in a fenced root would reach on the host).
	Guard []string
	// DevFD, when positive, is a /dev/fuse descriptor that another process already
	// mounted (mount(2) with "fd=N"); the fence serves it instead of mounting, and
	// Mountpoint only names the mount in messages. toh-exec --fence mounts this way
	// inside a run's own mount namespace. Unmount cannot unmount such a mount: it
	// ends when the last process of that namespace does.
	DevFD int
}

// DefaultTimeout is the default kernel cache lifetime (see Config.Timeout).
const DefaultTimeout = time.Second

// maxWrite is the largest READ and WRITE request: 254 pages, so that a READ reply
// and go-fuse's header fit the default 1 MiB pipe it splices through.
const maxWrite = 1<<20 - 8<<10

// Fence is a mounted fence.
type Fence struct {
	server *fuse.Server
	f      *fence
	mp     string
	// selfMounted: the daemon made the mount itself (mountAt), so go-fuse
	// cannot unmount it.
	selfMounted bool
}

// fence is the state shared by every node of one mount.
type fence struct {
	source string // canonical
	srcDev uint64
	// mountpoint is the canonical mountpoint ("" for a DevFD mount).
	mountpoint string
	// mirror keeps this process's canon.Canonical out of the mount while it is
	// served (nil for a DevFD mount): the policy's own paths (roots, git
	// directories) are resolved inside requests, and a lookup in the mount from
	// there could wait forever on a lock the kernel holds for the request.
	mirror *canon.Mirror
	// ownDev is this mount's own device once it is up (0 before, and for a DevFD
	// mount): host paths are canonicalized without looking anything up on it (see
	// canon.CanonicalAvoiding and RuleOwnMount).
	ownDev atomic.Uint64
	// ownMnt is the mount's ID (statx STATX_MNT_ID) in the daemon's namespace,
	// with ownDev, once identify has proved the mount this daemon's (0 before).
	ownMnt atomic.Uint64
	// probe is the name openOwnRoot looks up to tell this daemon's mount from
	// another one at the same path (a new one each time: the kernel caches the
	// answer); probed is set when the root was asked it.
	probe     atomic.Pointer[string]
	probed    atomic.Bool
	slashFd   int // O_PATH fd of "/", to open writable roots without following symlinks
	pol       PolicySource
	audit     *AuditLog
	onDeny    func(Event)
	admit     func(tid uint32) bool
	guard     []string // canonical (Config.Guard)
	auditPath string   // canonical path of the audit log, guarded like the policy file
	euid      uint32   // the daemon's effective uid (see asRoot, ownRights)
	shared    bool     // other users may see the mount (Config.AllowOther)
	// protectedSymlinks is the host's fs.protected_symlinks, read at Mount (see
	// ownerOnly); atomic so that a test can switch it on where the host has it off.
	protectedSymlinks atomic.Bool
	timeout           time.Duration // the kernel's entry and attribute cache lifetime
	debug             bool
	logf              func(string, ...any)
	root              *node
	// sourceGone is set once SOURCE was found to be another directory than the
	// mounted one (see node.stale).
	sourceGone atomic.Bool

	mu   sync.Mutex
	snap *snapshot

	dirs dirCaches // directory nodes' cached host directories (see dirCache)

	protVer atomic.Uint64 // numbers protected sets (see protSet.ver)

	server      *fuse.Server
	passthrough atomic.Bool // the kernel takes backing files from this daemon
	pending     sync.Map    // request cancel channel -> backing ID for its answer (see rawFS)
	killpriv    atomic.Bool // the kernel leaves clearing set-ID bits to this daemon (see killSetID)
	openKill    sync.Map    // request cancel channel of an OPEN or CREATE with FUSE_OPEN_KILL_SUIDGID
}

// asRoot reports whether the daemon runs as root: it mounts directly, chowns new
// entries to their caller, and is a deputy for other users (see doc.go).
func (f *fence) asRoot() bool { return f.euid == 0 }

// Mount mounts a fence for cfg and starts serving it. It sets the process umask to
// 0: the kernel has already applied the caller's umask to every mode it sends.
func Mount(cfg Config) (*Fence, error) {
	if cfg.Policy == nil {
		return nil, errors.New("fusefence: Config.Policy is nil")
	}
	source := canon.Canonical(cfg.Source)
	var st unix.Stat_t
	if err := unix.Stat(source, &st); err != nil {
		return nil, fmt.Errorf("source %q: %w", cfg.Source, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("source %q: not a directory", cfg.Source)
	}
	slashFd, err := canon.OpenRoot("/")
	if err != nil {
		return nil, err
	}
	f := &fence{
		source:  source,
		srcDev:  uint64(st.Dev),
		slashFd: slashFd,
		pol:     cfg.Policy,
		audit:   cfg.Audit,
		onDeny:  cfg.OnDeny,
		admit:   cfg.Admit,
		euid:    uint32(os.Geteuid()),
		shared:  cfg.AllowOther,
		debug:   cfg.Debug,
		logf:    cfg.Logf,
	}
	if f.logf == nil {
		f.logf = func(string, ...any) {}
	}
	if cfg.Audit != nil {
		f.auditPath = canon.Canonical(cfg.Audit.Path())
	}
	for _, g := range cfg.Guard {
		if c := canon.Canonical(g); strings.HasPrefix(c, "/") {
			f.guard = append(f.guard, c)
		}
	}
	if cfg.DevFD <= 0 {
		if err := f.checkOutsideMount(cfg); err != nil {
			unix.Close(slashFd)
			return nil, err
		}
		f.mirror = canon.ServeMirror(f.mountpoint, f.source)
		// A policy resolved before the mirror was registered has paths spelled
		// through MOUNTPOINT resolved as the empty directory under it.
		if r, ok := cfg.Policy.(interface{ Refresh() }); ok {
			r.Refresh()
		}
	}
	f.root = &node{f: f}

	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout < 0 {
		timeout = 0
	}
	f.timeout = timeout
	rootAttr := f.stable(&st, 1)
	fsName := "toh"
	if !strings.ContainsAny(source, ", \t\n\\") {
		fsName = "toh:" + source
	}
	opts := &fs.Options{
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NegativeTimeout: &timeout,
		NullPermissions: true, // show modes as they are, 0000 included
		RootStableAttr:  &rootAttr,
		MountOptions: fuse.MountOptions{
			FsName:     fsName,
			Name:       "toh",
			AllowOther: cfg.AllowOther,
			// Where other users see the mount, the kernel checks each of them
			// against the host's POSIX ACLs too, not the modes alone (see the
			// package doc, "POSIX ACLs").
			EnableAcl:   cfg.AllowOther,
			DirectMount: f.asRoot(), // no fusermount3 needed as root; it is the fallback
			Debug:       cfg.Debug,
			// OPEN carries O_TRUNC, so the fence truncates only after judging the
			// open; otherwise the kernel truncates through a separate SETATTR.
			// No OPENDIR and RELEASEDIR round trips where the kernel allows it
			// (noopendir); listings keep the kernel's cache all the same.
			// The kernel leaves clearing set-ID bits to the daemon and stops asking
			// for security.capability before every write (see killSetID).
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_NO_OPENDIR_SUPPORT | fuse.CAP_HANDLE_KILLPRIV_V2,
			// One WRITE per MiB of a large write(2) instead of eight; a READ answered
			// by splice must fit the pipe (1 MiB by default) with its header.
			MaxWrite: maxWrite,
		},
	}
	// Device nodes and set-ID programs in SOURCE must not come alive through the
	// mirror; spelled out because fusermount3 run by root would not add them.
	opts.MountOptions.Options = []string{"nodev", "nosuid"}
	if cfg.AllowOther {
		opts.MountOptions.Options = append(opts.MountOptions.Options, "default_permissions")
	}
	if cfg.Debug {
		opts.MountOptions.Logger = newLogger(f.logf)
	}
	mountpoint := cfg.Mountpoint
	selfMounted := false
	switch {
	case cfg.DevFD > 0:
		// go-fuse's "/dev/fd/N" form: serve the descriptor, mount nothing.
		mountpoint = fmt.Sprintf("/dev/fd/%d", cfg.DevFD)
		opts.MountOptions.DirectMount = false
	case f.asRoot():
		// As root the daemon mounts through a descriptor of the mountpoint (see
		// mountAt) and hands go-fuse the connection, as for DevFD.
		fd, err := mountAt(slashFd, f.mountpoint, &opts.MountOptions)
		if err != nil {
			unix.Close(slashFd)
			f.forgetMirror()
			return nil, fmt.Errorf("mounting %q: %w", cfg.Mountpoint, err)
		}
		mountpoint = fmt.Sprintf("/dev/fd/%d", fd)
		opts.MountOptions.DirectMount = false
		selfMounted = true
	}
	// Unreadable counts as on: refusing a follow is the safe mistake.
	f.protectedSymlinks.Store(!sysctlOff("/proc/sys/fs/protected_symlinks"))
	unix.Umask(0)
	raw := &rawFS{RawFileSystem: noopendir.Wrap(fs.NewNodeFS(f.root, opts)), f: f}
	server, err := fuse.NewServer(raw, mountpoint, &opts.MountOptions)
	if err != nil {
		unix.Close(slashFd)
		f.forgetMirror()
		return nil, fmt.Errorf("mounting %q: %w", cfg.Mountpoint, err)
	}
	f.server = server
	stopSweep := make(chan struct{})
	if f.timeout > 0 {
		go f.sweepLoop(stopSweep)
	}
	go func() {
		server.Serve()
		close(stopSweep)
		f.forgetMirror()
	}()
	if err := server.WaitMount(); err != nil {
		unix.Close(slashFd)
		return nil, fmt.Errorf("mounting %q: %w", cfg.Mountpoint, err)
	}
	// Backing files (passthrough reads, see ioMode) need the capability on both
	// sides; the kernel's BACKING_OPEN also wants CAP_SYS_ADMIN, checked at the
	// first one.
	if cfg.DevFD <= 0 {
		// Served by now, so the probe is answered (by another reader).
		if err := f.identify(); err != nil {
			f.logf("cannot tell which mount is this daemon's (%v): not ending copies of it on stop, and not watching for an unmount from outside", err)
		}
		if selfMounted {
			f.pollHack()
		}
	}
	f.passthrough.Store(f.asRoot() && server.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH != 0)
	f.killpriv.Store(server.KernelSettings().Flags64()&fuse.CAP_HANDLE_KILLPRIV_V2 != 0)
	return &Fence{server: server, f: f, mp: cfg.Mountpoint, selfMounted: selfMounted}, nil
}

// checkOutsideMount refuses a mountpoint that would make the daemon serve itself:
// one inside SOURCE (the mirror would contain itself, and listing it would recurse),
// one containing SOURCE (the mount would hide the tree it mirrors from the paths the
// fence resolves), and one containing the policy file or the audit log (read and
// written from inside requests, they would be requests to the daemon itself, which
// can wait on each other forever).
func (f *fence) checkOutsideMount(cfg Config) error {
	mp := canon.Canonical(cfg.Mountpoint)
	if f.asRoot() {
		var err error
		if mp, err = trustedPath(cfg.Mountpoint); err != nil {
			return fmt.Errorf("mountpoint %q: %w", cfg.Mountpoint, err)
		}
	}
	f.mountpoint = mp
	switch {
	case canon.LexicallyWithin(mp, f.source):
		return fmt.Errorf("mountpoint %q is inside source %q: the mirror would contain itself", cfg.Mountpoint, cfg.Source)
	case canon.LexicallyWithin(f.source, mp):
		return fmt.Errorf("source %q is inside mountpoint %q: the mount would hide it", cfg.Source, cfg.Mountpoint)
	case f.auditPath != "" && canon.LexicallyWithin(f.auditPath, mp):
		return fmt.Errorf("audit log %q is inside mountpoint %q: keep it outside the mount", cfg.Audit.Path(), cfg.Mountpoint)
	}
	if p, ok := cfg.Policy.(interface{ Path() string }); ok && p.Path() != "" {
		if pp := canon.Canonical(p.Path()); canon.LexicallyWithin(pp, mp) {
			return fmt.Errorf("policy file %q is inside mountpoint %q: keep it outside the mount", p.Path(), cfg.Mountpoint)
		}
	}
	return nil
}

// canon is canon.CanonicalAvoiding on this mount's own device: ok is false when
// the path leads into the mount itself.
func (f *fence) canon(unsafePath string) (path string, ok bool) {
	return canon.CanonicalAvoiding(unsafePath, f.ownDev.Load())
}

// forgetMirror ends the mirror's registration once the mount is no longer served.
func (f *fence) forgetMirror() {
	if f.mirror != nil {
		f.mirror.Forget()
	}
}

// Wait blocks until the mount is unmounted (by Unmount, toh-mount -u, or umount).
func (m *Fence) Wait() {
	m.server.Wait()
	m.f.forgetMirror()
}

// Unmount unmounts the fence and waits for its requests to end. It fails with EBUSY
// while files on the mount are open; see [Unmount] for a lazy unmount.
func (m *Fence) Unmount() error {
	if m.selfMounted {
		if err := unix.Unmount(m.f.mountpoint, unix.UMOUNT_NOFOLLOW); err != nil {
			return fmt.Errorf("unmounting %q: %w", m.mp, err)
		}
		m.server.Wait()
	} else if err := m.server.Unmount(); err != nil {
		return fmt.Errorf("unmounting %q: %w", m.mp, err)
	}
	m.f.forgetMirror()
	return nil
}

// Stop ends the mount for good, for a daemon that is exiting, and returns once its
// requests have ended: every request on it fails from then on (ENOTCONN), here and
// in every other mount namespace that holds a copy of it. A sandbox started while it
// was mounted holds one (bwrap's --ro-bind / / copies every mount below, toh-exec's
// runs included), and a plain unmount removes only this namespace's: the kernel then
// keeps the connection, go-fuse's readers keep waiting on it, and the daemon would
// go on serving those copies after SIGTERM, until the last such sandbox ended.
//
// As root, umount2 with MNT_FORCE: FUSE's umount_begin aborts the connection before
// the unmount is tried, and a mount still in use is then detached (MNT_DETACH), dead.
// Otherwise fusermount3 -u (-z when busy). If the requests have not ended after
// grace (the mount was unmounted here already, or this is not root), the
// connection is aborted through the fuse control file system
// (/sys/fs/fuse/connections/N/abort, writable by the mount's owner where it is
// mounted, as systemd does; as root one is mounted for this in a mount namespace
// of its own where none is, see abortConnection); without it the daemon waits for
// those sandboxes, and says so through logf.
func (m *Fence) Stop(grace time.Duration, logf func(string, ...any)) {
	ended := make(chan struct{})
	go func() {
		m.server.Wait()
		close(ended)
	}()
	if !m.mountedHere() {
		// Unmounted here already (toh-mount -u, umount, see Unmounted): only the
		// control file system can end the copies.
	} else if os.Geteuid() == 0 {
		// Through the mount itself, proved the daemon's: never by a path someone
		// could have pointed at another mount.
		if err := m.forceUnmount(); err != nil {
			logf("not unmounting: %v", err)
		}
	} else {
		// fusermount3 unmounts only a mount of this user's; where it is now, if a
		// directory above it was renamed.
		mp := m.mp
		if at, err := m.f.listedAt(); err == nil {
			mp = at
		}
		if err := Unmount(mp, false); err != nil {
			logf("%v; detaching it", err)
			if err := Unmount(mp, true); err != nil {
				logf("%v", err)
			}
		}
	}
	select {
	case <-ended:
	case <-time.After(grace):
		// The connection is the daemon's as long as it serves (the device cannot
		// have gone to another mount), and it does: ended is still open.
		err := abortConnection(m.f.ownDev.Load())
		switch {
		case err == nil:
		case m.mountedHere():
			// Neither unmounted nor abortable (the mount could not be proved this
			// daemon's, or was moved under a path being raced): waiting would be
			// for ever. The daemon exits, and with its descriptor the connection
			// ends: the mount fails every request, as after kill -9.
			logf("%s could not be unmounted, and the connection cannot be aborted (%v): exiting; the mount fails every request (ENOTCONN) until it is unmounted", m.mp, err)
			m.f.forgetMirror()
			return
		default:
			logf("%s is still served in another mount namespace (a sandbox started while it was mounted), "+
				"and the connection cannot be aborted (%v): waiting for those to end (to end them now, root can mount the fuse control file system: mount -t fusectl fusectl /sys/fs/fuse/connections)", m.mp, err)
		}
		<-ended
	}
	m.f.forgetMirror()
}

// snapshot is one generation of the policy with the writable roots opened. It is
// reference counted: a reload retires it, and the last request using it closes the
// root descriptors.
type snapshot struct {
	gen   uint64
	x     policy.Execution
	prot  protState // x's protected set, resolved again once it is older than the bound (see protSet)
	err   error
	roots map[string]int // canonical root -> O_PATH fd; a root that cannot be opened is absent
	refs  atomic.Int32
}

func (s *snapshot) release() {
	if s.refs.Add(-1) == 0 {
		for _, fd := range s.roots {
			unix.Close(fd)
		}
	}
}

// acquire returns the current snapshot with a reference the caller must release,
// reloading the policy source first (one stat(2) for a watcher).
func (f *fence) acquire() *snapshot {
	x, gen, err := f.pol.Current()
	f.mu.Lock()
	defer f.mu.Unlock()
	// A concurrent request may already have installed a newer generation.
	if f.snap == nil || gen > f.snap.gen {
		s := f.newSnapshot(gen, x, err)
		if f.snap != nil {
			f.snap.release()
		}
		f.snap = s
	}
	f.snap.refs.Add(1)
	return f.snap
}

func (f *fence) newSnapshot(gen uint64, x policy.Execution, err error) *snapshot {
	s := &snapshot{gen: gen, x: x, err: err, roots: map[string]int{}}
	s.refs.Store(1)
	if err != nil {
		s.prot.cur.Store(&protSet{ver: f.nextProtVer(), refresh: never})
		f.logf("POLICY INVALID: denying every mutation until the policy file is fixed: %v", err)
		return s
	}
	if f.mountpoint != "" {
		// A root inside the mount itself was resolved without this mount's mirror
		// (see canon.Mirror; Mount refreshes a Watcher): no host target lies there,
		// and looking for git directories beneath it, or opening it, would be
		// requests to this daemon from inside one.
		x.WritableRoots = slices.DeleteFunc(slices.Clone(x.WritableRoots), func(r string) bool {
			if canon.LexicallyWithin(r, f.mountpoint) {
				f.logf("writable root %q is inside the mount itself, which holds no host path; mutations beneath it are denied", r)
				return true
			}
			return false
		})
		s.x = x
	}
	var roots []string
	switch x.Mode {
	case policy.DangerFullAccess:
		roots = []string{"/"}
	case policy.WorkspaceWrite:
		roots = x.WritableRoots
	}
	ps := resolveProtected(x, nil, time.Now(), f.protBound(), f.nextProtVer, f.guard...)
	s.prot.cur.Store(ps)
	f.logf("policy generation %d: mode %s, writable roots %q, protect %q, protected paths %q %q", gen, x.Mode, x.WritableRoots, x.Protect, ps.g.policy, ps.g.protect)
	for _, r := range roots {
		// Roots are canonical: opening them beneath "/" without following symlinks
		// keeps a symlink swapped into a root's spelling from moving the root.
		fd, err := canon.OpenBeneath(f.slashFd, r, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			f.logf("writable root %q unusable, mutations beneath it are denied: %v", r, err)
			continue
		}
		s.roots[r] = fd
	}
	return s
}

// host is the host spelling of the mount-relative path rel ("" is the root).
func (f *fence) host(rel string) string {
	switch {
	case rel == "":
		return f.source
	case f.source == "/":
		return "/" + rel
	}
	return f.source + "/" + rel
}

// admitted reports whether the fence acts for the caller of ctx (Config.Admit).
// The kernel's own requests (tid 0: write-back through a handle) are judged by
// the handle's opener instead (recheck).
func (f *fence) admitted(ctx context.Context) bool {
	if f.admit == nil {
		return true
	}
	c, ok := fuse.FromContext(ctx)
	return ok && c.Pid != 0 && f.admit(c.Pid)
}

// deny records a denial and returns EACCES; a caller the fence does not act for
// (Config.Admit) gets EACCES and no record.
func (f *fence) deny(ctx context.Context, s *snapshot, op, rel, hostPath, rule string) syscall.Errno {
	if !f.admitted(ctx) {
		return syscall.EACCES
	}
	ev := Event{Time: time.Now(), Op: op, Path: rel, HostPath: hostPath, Rule: rule}
	if ev.Path == "" {
		ev.Path = "."
	}
	if s != nil && s.err == nil {
		ev.Mode = string(s.x.Mode)
	}
	if c, ok := fuse.FromContext(ctx); ok {
		ev.PID, ev.UID = processOf(c.Pid), c.Uid
	}
	if f.audit != nil {
		f.audit.Log(ev)
	}
	if f.onDeny != nil {
		f.onDeny(ev)
	}
	if f.debug {
		f.logf("denied %s %q (%s) pid %d: %s", op, ev.Path, hostPath, ev.PID, rule)
	}
	return syscall.EACCES
}

// processOf returns the process (thread group) of the thread tid. FUSE names the
// calling thread, not its process: a denial from a second thread of a program would
// otherwise be recorded under an id no "ps" lists (found by review). Read from
// /proc/TID/status, which the kernel serves for any thread id, only for a denial;
// a thread that is gone by then keeps its own id. Both are ids in the daemon's PID
// namespace, the one the kernel reports in.
func processOf(tid uint32) uint32 {
	if tid == 0 || !procIsOurs() {
		return tid
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return tid
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil && n != 0 {
				return uint32(n)
			}
			break
		}
	}
	return tid
}

// procIsOurs says whether /proc shows this process's PID namespace (/proc/self is
// this process): in another one /proc/TID would name another process.
var procIsOurs = sync.OnceValue(func() bool {
	self, err := os.Readlink("/proc/self")
	return err == nil && self == strconv.Itoa(os.Getpid())
})

// stable is the identity go-fuse keys inodes by. The device is mixed into the inode
// number as go-fuse's loopback does, so a tree spanning mounts gets no collisions
// while the source's own device keeps its plain inode numbers; gen tells a reused
// inode number apart (the birth time where the file system records one).
func (f *fence) stable(st *unix.Stat_t, gen uint64) fs.StableAttr {
	swapped := uint64(st.Dev)<<32 | uint64(st.Dev)>>32
	swappedRoot := f.srcDev<<32 | f.srcDev>>32
	return fs.StableAttr{
		Mode: uint32(st.Mode) & unix.S_IFMT,
		Ino:  (swapped ^ swappedRoot) ^ uint64(st.Ino),
		Gen:  gen,
	}
}
