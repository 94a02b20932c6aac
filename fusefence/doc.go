// Package fusefence owns toh's FUSE fence: a mirror of a host directory (SOURCE)
// whose reads pass through and whose every mutation is judged, at the moment it
// happens, by the shared policy file, performed relative to a directory descriptor
// that no symlink can redirect, and, when denied, answered with EACCES and recorded
// in an audit log.
//
//	w, err := policy.NewWatcher(policyPath, policy.Request{SessionID: id, Cwd: wd}, nil)
//	audit, err := fusefence.OpenAudit(auditPath)
//	m, err := fusefence.Mount(fusefence.Config{Source: src, Mountpoint: mnt, Policy: w, Audit: audit})
//	defer audit.Close()
//	m.Wait()
//
// # What the mirror shows
//
// MOUNTPOINT/x stands for SOURCE/x (SOURCE canonicalized once, at Mount). Reads
// (lookup, getattr, readdir, open for reading, read, readlink, getxattr, listxattr,
// statfs) pass through in every mode, through host path strings: they change
// nothing, and the SPEC allows reads everywhere.
//
// The kernel resolves a FUSE symlink itself, so a symlink whose text leads out of
// the mount would let a write land on the host without ever reaching the fence. A
// host symlink that sits in a directory reached without host symlinks and has one
// link is therefore shown as a symlink with a text that climbs ("..") only at its
// start and no higher than the mount root: its own text when that text is such
// (this keeps in-tree relative links, as git checks them out, intact), else, when
// it leads to an existing entry inside SOURCE (an absolute link into the tree, a
// relative one that climbs out and back), the relative text from its directory to
// that entry's canonical path. Such links only climb to a real ancestor and then
// descend, so no chain of them leaves the mount, and no directory of SOURCE
// appears under a second name. Every other symlink (leading out of SOURCE, or
// reached through a link, or hard-linked) is shown as what it leads to, so
// operations beneath or through it come to the fence, which judges them where
// they really land; one that leads nowhere is not shown, and creating at its name
// creates at its target if the policy allows that target. Its name itself is
// still the link's: unlink, rename, and rmdir of one shown as a directory remove
// or move the link, judged by the link's own path, never what it leads to. A
// directory shown under a name below itself (a link out whose directory leads back
// to it, a bind mount of an ancestor) answers ELOOP there, as the kernel does for
// such an alias. What that costs a caller (found by review): git through the mount
// sees a committed symlink that leads out of SOURCE as a file whose content is its
// target's ("T" in git status, and "git commit -a" would commit that content);
// "python3 -m venv" chmods what it takes for a copied interpreter and is refused
// (--copies works); "cp -a" cannot give such an entry its owner back; tar archives
// it as a file.
//
// A symlink that leads back into the mount itself (to MOUNTPOINT or below, or
// through a mount of this file system elsewhere) answers ELOOP too, and a mutation
// whose target has come to lead there is denied with rule own-mount. Following it,
// the daemon would look names up in its own file system from inside a request, and
// the kernel may hold, for that very request, the directory lock such a lookup
// needs: an open with O_CREAT of the link's name holds its directory while the
// daemon answers the LOOKUP, and the two would wait on each other forever, with
// every later request in that directory behind them. So host paths are
// canonicalized without any lookup on the mount's own device
// (canon.CanonicalAvoiding), which also bounds the recursion of a link to the
// mount's root. Every read by host path (lookup, getattr, open, opendir, readlink,
// getxattr, listxattr, statfs) reaches the name's directory by an openat2 from "/"
// that follows no symlink, and, when a link is on the way, canonicalizes that
// directory the same way first; a symlink in the name itself is followed only to
// its canonical target. So a link turned into the mount after the kernel cached
// it is refused too: a directory link turned to lead through the mount to itself,
// then a create beneath it, would otherwise wait forever, and a read through a
// turned link would recurse, the daemon opening its own node, which opens through
// the same link, one blocked thread per round (6,000 threads before the kernel's
// ELOOP, measured). For the same reason Mount refuses a MOUNTPOINT inside SOURCE
// or containing it, and a policy file or audit log inside MOUNTPOINT. A component
// of a canonical path replaced by such a link between its canonicalization and the
// call that walks it (a racer on the host, renameat2 RENAME_EXCHANGE) is never
// followed: the walk itself (canon) and every later lookup of a canonical path
// (statxNoLinks, openNoLinks, the reachability check's directories) follow no
// symlink on the way, and fail with ELOOP instead. Until 2026-12-01 such a lookup
// was a plain lstat/stat by path, and a review showed it entering the mount in the
// directory the kernel held locked for the request being served: the request and
// the lookup waited on each other, and the directory hung until the connection was
// aborted (a CREATE hung within 2.5 s of racing; 3 runs of 30 s race without a hang
// since). Where openat2 is missing (Linux before 5.6) the plain calls remain.
// Not covered: mount points. Root can bind-mount MOUNTPOINT somewhere inside
// SOURCE after Mount; the walks from "/" cross mounts, so a mutation beneath that
// bind reaches the daemon again as a request of its own, which is judged like any
// other (nothing hung or escaped in review), but its audit record then names the
// daemon's pid and the inner path, not the caller's.
//
// The policy's own paths are resolved inside requests too (a changed policy file,
// the protected set's refresh), and they may lead into the mount: a workspace root
// or writable root spelled as MOUNTPOINT/..., which is what a harness that sends its
// agent to the mount naturally writes, or a .git (or a gitdir: line) that the agent
// pointed through the mount. While a mount is served, its process registers it as
// a canon.Mirror, so canon.Canonical (and everything in package policy) looks every
// name below MOUNTPOINT up below SOURCE instead, which the mount shows name for
// name: such a root or git directory means the SOURCE directory it shows, the two
// families agree on it, and no lookup ever enters the mount (before this, the first
// mutation after such a policy loaded waited forever). A served mount reached
// some other way, a bind mount of it elsewhere, canonicalizes to "" (contained in
// nothing). A fence served through Config.DevFD does
// not know its device and does none of this; toh-exec --fence mounts in the
// run's own mount namespace, which the daemon's host paths never enter.
//
// # How a mutation is decided and performed
//
// Every mutation first takes the policy in force: the [PolicySource] is asked on
// each one ([policy.Watcher] stats the policy file and re-resolves it when its
// (dev, ino, size, mtime, ctime) changed), so a mode switch or a session event
// applies to the next operation. A malformed file denies every mutation (rule
// policy-invalid) until a valid one returns. Then:
//
//  1. The host target is re-resolved now: for operations on a name (create, mkdir,
//     mknod, symlink, link, unlink, rmdir, rename) the parent directory is
//     canonicalized with canon.Canonical and the name appended; for operations on
//     what a path leads to (open for writing or with O_TRUNC, truncate, chmod,
//     chown, utimes, set/remove xattr) the whole path is, a symlink in the last
//     component included. A symlink inside SOURCE that points out is judged by
//     where it really leads.
//  2. The decision is a pure function of that canonical path and the execution
//     policy: read-only denies; workspace-write needs a writable root containing
//     the target (canon.LexicallyWithin; the tightest one is used, and for a
//     root's own name the tightest one strictly containing it) and denies a
//     target equal to or beneath a protected path (rule protected), the policy
//     file and its .lock (rule policy-file), and the audit log. The protected paths
//     are policy.Execution.ProtectedPaths, the set bwrap and Seatbelt protect too:
//     protect entries relative to each root, ".git/..." entries below each git
//     directory of the root (its .git directory or what a .git file names, the
//     common directory, worktrees/*, modules/**), those git directories' commondir
//     and config.worktree, which may not be created, their modules/ (which may
//     gain no entry; beneath the submodule git directories in use in it,
//     policy.ProtectedPath.Except, only their own protected paths are denied, and
//     their own names and modes are kept; so are the names and modes of their
//     HEAD, objects/ and refs/, policy.ProtectValid, which keep each a valid git
//     directory: git refuses a submodule git directory nested in another only
//     while the outer one is valid, review F5), and a .git pointer file. Such a
//     HEAD is replaced only by a plain rename bringing a regular file whose content
//     git takes for a HEAD (policy.ValidHead, at most 4 KiB), which the fence
//     performs as a copy the caller holds no descriptor of (renameHead): git's
//     HEAD.lock and rename work, and nothing written afterwards reaches HEAD. The
//     set is resolved when a policy generation starts, protecting every git
//     directory that exists then, and again at the first mutation once it is older
//     than the bound (Config.Timeout, DefaultTimeout when caching is off; 1 s by
//     default). A git directory (or .git pointer) that appeared since is the run's
//     own until it is the bound old (its birth time, else when the fence first
//     saw it), so git init, git clone and git worktree add can write its hooks,
//     config and commondir (git submodule add cannot: it needs a new entry in
//     modules/); from the first mutation after that,
//     its entries are protected like those of a repository that existed at mount.
//     The bound: a repository made while the fence serves has protected hooks and
//     config at most the bound after it was created (twice the bound where the
//     file system records no birth time); a git command that writes its new
//     repository's config later than that (a clone that runs longer) is denied.
//     A descriptor opened for writing is judged again when the set changes, as
//     when the policy does (passthrough writers excepted, see Decisions).
//     Operations that put something
//     at a name that could hold or redirect such a guarded path (both ends of a
//     rename, symlink, link, a new non-directory) are also denied at a strict
//     ancestor of it: `mv .git x`, or a prepared directory, file or symlink moved to
//     `.git`, would otherwise move protected content out of reach or swap new
//     content in. So are changes that widen who may change an ancestor (a mode
//     giving the group or others write, chown, a POSIX ACL): `chmod 0777 .git`
//     would let another local user replace the hooks later, outside the fence.
//     `toh-exec why --op write` does not tell widening from narrowing and answers
//     allow there. danger-full-access allows everything but device nodes.
//  3. The mutation is performed relative to a descriptor of the parent opened
//     without following any symlink. Usually that is the decision's own: the
//     walk of step 1 that confirmed the parent's path canonical is one openat2
//     from "/" with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS (magic links included),
//     so the directory it opened is the one at that canonical path, within the
//     root, at that moment, and the mutation goes through it (one walk per
//     mutation, not two). Otherwise (a symlink on the way, resolved by
//     canon.Canonical; no openat2) the parent is opened with
//     canon.OpenParentBeneath from a cached O_PATH descriptor of the writable root
//     (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS, or a
//     no-follow walk), and its (dev, ino) must equal what stat saw of the
//     canonical parent during the decision; a symlink on the way or a different
//     directory is a denial (rule symlink-race). The last component is never
//     followed (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW, an O_PATH descriptor used with
//     AT_EMPTY_PATH or through /proc/self/fd). A change to an inode itself
//     (chmod, chown, utimes, truncate, an xattr) needs no parent: the decision's
//     walk is one openat2 of the whole path with O_PATH|O_NOFOLLOW and the same
//     resolve flags, and the change is made on that descriptor, so it lands on
//     exactly the object found at the canonical path; its fstat is what the node
//     and link-count checks read. A symlink at the end or on the way, a missing
//     target, SOURCE itself, or no openat2 takes the parent route above. Root
//     descriptors are reopened, beneath "/" and without following symlinks,
//     whenever the policy generation changes.
//
// Writes through an open descriptor (write, fallocate, copy_file_range into it,
// ftruncate) act on the inode judged at open. When the policy or its protected set
// changed since, the handle's open-time canonical path is judged again under the
// new one first, so tightening applies to descriptors already open too, with one
// exception: write(2) through a passthrough writer (below) reaches no daemon.
//
// A denied open never truncates: the fence asks the kernel for atomic O_TRUNC and
// truncates only after every check passed. Denials are EACCES. Other errors are
// the host's errno (found with errors.As), EIO when there is none, and never
// ENOSYS, which the kernel would take as "never implemented" for the whole mount.
// The one deliberate ENOSYS is the answer to OPENDIR (see Caching and staleness).
//
// # Decisions
//
//   - Hard links. Linking into the mount needs the source inside a writable root and
//     not protected. A write-open, truncate, chmod, chown, utimes or xattr change of
//     a non-directory with more than one link is denied (rule multiply-linked): its
//     other names may lie outside every root and nothing lists them. The price: a
//     file hard-linked inside the workspace (git's local clones link objects, which
//     git never rewrites, though it refreshes their times: each such utimes is
//     denied and recorded, and git then writes the object anew; pnpm links package
//     files) is read-only through the fence.
//     unlink and rename of such a file are allowed: they change names, not the file.
//     Such a file is one inode to the kernel, judged under the name it was last
//     looked up by: a change of its content is denied under any name, as
//     multiply-linked inside a root and as outside-writable-roots outside. For the
//     same reason a new link to it is denied (multiply-linked): judged at a name
//     inside a root, a link to a file whose other name lies outside changed that
//     outside file's link count and ctime (found by review). A denial's path is
//     that last-looked-up name, which may not be the one the caller used.
//   - Passthrough writers. A write-only open that creates its file (the kernel's
//     CREATE, O_EXCL on the host: tar, cp, compilers, dd to a new name) is
//     answered, where passthrough is available and no other file of the inode is
//     open, with the host file as its backing file: the kernel writes it directly,
//     and write(2), pwrite and shared mappings of that descriptor no longer reach
//     the fence. They were judged with the creation, at the re-resolved target,
//     as the SPEC asks of every open for writing; "tightening applies immediately
//     to new opens" still holds: after a mode switch or a protected-set refresh,
//     every new open, create and name operation is judged under the new policy,
//     and so is everything else through that descriptor that still reaches the
//     daemon (ftruncate, fallocate, copy_file_range, chmod). What is given up:
//     the descriptor that created a file keeps writing that file after a
//     tightening, until it is closed, and those writes leave no audit record. The
//     same holds after the daemon is killed: the mount then fails every operation
//     that reaches it, but such a descriptor's writes go to its backing file,
//     which the kernel holds (found by review), again only the file it created.
//     That file held nothing before the caller created it, so no content a
//     tightening protects is at stake, with one exception: a file created within
//     a new repository's grace bound stays writable through its creating
//     descriptor past the bound (git's own lock files are created read-write, so
//     they are not passthrough writers).
//     Opens of files that existed (O_WRONLY, O_RDWR, O_TRUNC) stay WRITE
//     requests, judged again after every tightening; read-write creates too (their
//     page cache must be written back through the fence). A multiply-linked file
//     is never a passthrough writer: a new file has one link, and opening an
//     existing one for writing is refused. Before a passthrough write that must
//     clear set-ID bits the kernel asks the fence to (a SETATTR the fence judges
//     like chmod; see Set-ID bits). TestPassthroughWriterOfCreatedFile pins all
//     of this.
//   - Set-ID bits. The daemon runs with CAP_FSETID, so the host never clears
//     set-user-ID and set-group-ID bits for it; the fence clears them itself
//     where Linux would for the caller. The mount negotiates
//     FUSE_HANDLE_KILLPRIV_V2 (Linux 5.11), so the kernel tells the fence when a
//     caller without CAP_FSETID truncates (FATTR_KILL_SUIDGID), opens with
//     O_TRUNC (FUSE_OPEN_KILL_SUIDGID), or writes through the page cache or a
//     passthrough writer (a SETATTR that asks for nothing else, as chown(f, -1,
//     -1) sends), and stops looking up security.capability before every write;
//     a chown as root clears them on the host by itself. The bits cleared are
//     set-user-ID, and set-group-ID of a group-executable file, as the kernel
//     clears them for a FUSE file system without that capability (a host file
//     system also clears a non-executable set-group-ID bit for a caller outside
//     the group). TestSetIDClearedAsOnHost compares every path with the same
//     change of a host file, unprivileged and as root.
//   - Device nodes are denied by mknod in every mode, danger-full-access included,
//     and so is a rename with RENAME_WHITEOUT, which leaves one (0:0) in the
//     source's place (op rename, rule device-node).
//     FIFOs and sockets follow the policy. The mount is nodev and nosuid.
//   - ioctls: FS_IOC_GETFLAGS and FS_IOC_FSGETXATTR (read-only inode flag queries,
//     lsattr) pass through on files; terminal ioctls (type 'T', isatty) answer
//     ENOTTY as a regular file would, without an audit line; everything else is
//     denied (rule ioctl): FS_IOC_SETFLAGS, FICLONE and the rest change things the
//     fence cannot judge.
//   - O_TMPFILE is not supported (EOPNOTSUPP); callers fall back to named files.
//   - Entries the fence creates as root belong to the caller (uid, and gid unless
//     the parent is set-group-ID), as on a local file system: a file is given to
//     the caller through the descriptor of its create; a directory, node or symlink
//     is made with the caller's file-system ids from the start (never chowned by
//     name afterwards, which a rename on the host could have pointed at a file
//     outside every root).
//
// # Audit log
//
// Each denial is one JSON line {time, pid, uid, op, path, hostPath, mode, rule}
// (see [Event]; rules are the closed vocabulary of the Rule constants). Besides the
// policy's, the fence refuses what it does in place of the host kernel's own
// checks, on a read as on a write, and logs those too: a caller without the
// daemon's rights reaching through a link out of SOURCE where its own rights would
// not take it (rule unreachable: op lookup, getattr, open, readdir, getxattr,
// listxattr, or the mutation's), and a link fs.protected_symlinks lets only its
// owner follow (rule protected-symlink). Refusals the kernel makes itself (the
// modes it checks with default_permissions) and the sticky-bit EPERM the fence
// applies to a hidden link are not denials of the fence and leave no line; nor
// does an entry of a READDIRPLUS that such a refusal answers as a plain name (the
// caller is refused nothing). Records are queued to a
// writer goroutine. Queuing never blocks a FUSE request: beyond 4096 waiting events
// they are counted and a {"dropped":N} line follows. Lines are written whole, in
// batches of at most 64 KiB, so a killed daemon leaves no torn line; [ReadAudit]
// and [Filter] read the log back. A path that is not valid UTF-8 (a file name is
// any bytes) also travels as pathBytes or hostPathBytes, base64 of its exact
// bytes: JSON shows each invalid byte as U+FFFD, and two names differing only
// there would otherwise read as one.
//
// # Caching and staleness
//
// Entry, attribute and negative-entry timeouts are [DefaultTimeout] (1 s), SETATTR
// answers included. Directories keep their listing in the kernel's page cache
// (FOPEN_CACHE_DIR), which the kernel drops when the directory's mtime, refreshed
// with its attributes, has changed. Directories have no handles: where the kernel
// offers FUSE_NO_OPENDIR_SUPPORT (Linux 5.1) the first OPENDIR is answered ENOSYS,
// after which the kernel sends no OPENDIR or RELEASEDIR and opens every directory
// as FOPEN_KEEP_CACHE|FOPEN_CACHE_DIR on its own (fs/fuse/file.c, checked in
// Linux 6.18), so the listing cache stays; each READDIR opens the host directory
// for itself and seeks to the host's own offset (package noopendir). A warm git
// status sent two of every three of its requests as OPENDIR and RELEASEDIR; it
// takes half the time without them (bench/README.md). What it gives up: two
// listings of one directory by different callers at the same offset are not
// told apart, which host offsets make harmless (a listing continues after the
// entry it last returned, whatever changed since), and opendir(3) no longer
// reaches the daemon, which judged nothing there. Where the kernel allows it (root, Linux 6.9),
// a file opened only for reading is read from the host file directly
// (passthrough); otherwise, and while a read-write descriptor of the file is open,
// reads keep the page cache (FOPEN_KEEP_CACHE), dropped on a size or mtime change.
// Mutations through the mount update the kernel's caches as part of the request.
// A READDIRPLUS answers entries the kernel already holds as plain entries (no
// attributes), so listing names just looked up costs no host stat per entry; their
// cached attributes keep their own timeout. A directory whose entries are read
// (LOOKUP, GETATTR, READLINK, OPEN) keeps the host directory the first read opened
// (an O_PATH descriptor from the walk that follows no symlink) for at most the
// timeout, so each further read costs one statx or openat instead of a walk from
// "/" too: with every cached entry expired, a find -ls of Go's src/ costs the
// daemon 8% less CPU and a git status 14% less (bench/README.md). At most 1024
// such descriptors are held, each closed when its node is forgotten or, once
// expired, within another timeout; mutations never use them.
//
// A change made to SOURCE from outside the mount raises no inotify or fanotify event
// on the mount (the kernel learns of none): a watcher there (an editor, a test
// runner in watch mode) sees only changes made through the mount.
//
// Staleness bound: a change made to SOURCE from outside the mount is visible
// through it after at most the timeout (1 s): names, attributes, listings and,
// for page-cache reads, contents; a directory replaced on the host is read at its
// old place for at most as long (TestDirCacheBound). Passthrough reads see it at once. Exceptions,
// each kept until the next change the kernel can see: a content change that keeps
// both size and mtime hides from a page-cache read; a listing change that keeps
// the directory's mtime (possible only with coarse timestamps) hides from a cached
// listing; and so does the file type of an escaping symlink whose target changes
// type, which changes no mtime of the directory. TestStalenessBound measures the
// bound for names, attributes, contents and listings.
//
// The writeback cache stays off: it would turn a denied write into a silently
// dropped page, long after write(2) returned. Writes are WRITE requests the fence
// judges, except through a passthrough writer (see Decisions and ioMode).
//
// # Threat model
//
// The fence confines what its callers change through the mount. It trusts the
// kernel, the policy file's directory (whoever can write it can write any policy),
// and the writable roots' ancestors (a root is opened by its canonical path when
// the policy changes). It defends against a caller that races the fence by
// swapping directories and symlinks inside SOURCE and the roots: every mutation is
// performed on a parent reached without following symlinks, either from "/" by the
// decision's own walk or beneath the root's descriptor with its identity checked
// against the decision's, so it lands inside the root or not at all.
//
// As root the daemon is a deputy: with default_permissions the kernel checks each
// caller against the node's cached attributes, and the daemon then opens or changes
// the host object with root's rights. So every open (read or write), every
// setattr and xattr change, every xattr read and the source of every hard link act
// only on the inode the node stands for (node.isNode:
// device, inode number, type and, where statx gives it, birth time): a symlink
// retargeted on the host, or a name replaced outside the mount, within the cache
// timeout gets ESTALE, on which the kernel looks the name up again and checks the
// caller against what is there now. Before this (fixed 2026-11-30), a user who could
// retarget a link in SOURCE read /etc/shadow through a root mount: stat the link
// while it led to a world-readable file, retarget it, read within the second. A
// CREATE that finds its name existing (it appeared since the kernel looked) gets
// ESTALE for the same reason, and read opens carry O_NONBLOCK as write opens do, so
// a FIFO found at a regular file's place cannot hold a request.
// TestConfusedDeputyReplaced (read, write, chmod, hard link, xattr read; each fails
// without the check). As root a hard link is made from the checked descriptor
// itself (linkat AT_EMPTY_PATH); an unprivileged daemon links the name checked just
// before. A symlink node's xattrs are read from the link itself, opened O_PATH by
// the same verified walk (until 2026-12-01 by lgetxattr of the host path, which
// followed a directory swapped for a link on the way and read a root-only file's
// security.* xattrs for anyone; TestXattrsOfLinkAfterSwap). A file the mount has
// open (any handle, until its RELEASE) answers an xattr read from that handle's
// descriptor, with no walk, when the caller has the daemon's rights: the
// descriptor is the node's inode by construction, so the answer is the inode's
// own, as fgetxattr(2) gives it, even after the host moved or removed its name
// (the walk answered ESTALE there; TestXattrOfAnOpenFile). So a read by name, of a
// name the host gave to another file meanwhile, answers for the node the kernel
// still has at that name, the old file, until the kernel looks the name up again
// (the cache timeout), as stat(2) does; it answered for the new file before. The
// kernel asks for
// security.capability before a new file's first write and before each chown, both
// while the writer has it open: tar's untar sends two per file, and this took the
// daemon's CPU for an untar down 10% (2026-12-02). Any other caller gets the walk,
// which checks where the inode lies now (TestXattrOfAnOpenFileNotForADeputy). The
// list of names (listxattr) is read the same way. The daemon lists xattr
// names as root, which sees trusted.* names; a caller other than root gets the
// list without them, as the host gives it (TestTrustedXattrNamesHiddenFromOthers).
//
// Names are checked the same way. The kernel checks the caller's right to add or
// remove a name against the directory's cached attributes, so every create, mkdir,
// mknod, symlink, link, unlink, rmdir and both ends of a rename act only in the
// directory the parent node stands for (grant.inDir: the canonical parent the
// decision was made on is that inode), or answer ESTALE: a user's directory
// renamed away on the host and root's moved in at its name would otherwise receive
// the user's new names. A name removed or replaced (unlink, rmdir, both ends of a
// rename or exchange) must also still be the inode the kernel knows under it, or
// absent where it knows none (node.holdsEntry): in a sticky directory the kernel
// tests the victim's cached owner, and as root the daemon would remove or replace
// another user's file that took the name since; a link the mirror does not show,
// which the kernel takes for a free name, is replaced by a rename only as the
// sticky bit allows (fence.mayReplaceHidden). The kernel itself looks a plain
// rename's destination up again, but not an exchange's. Reads of a directory's
// entries (lookup, getattr, readlink, open) go through a host directory that must
// be the directory node's inode too (hostParentIn), or a user's directory replaced
// by root's private one would show its entries and open those whose own modes
// allow it (TestConfusedDeputyDirectoryRead). A create at the name of a link the
// mirror does not show (one that leads nowhere) makes the file where the link
// leads, a directory the kernel checked nothing against; it is done only for a
// caller with the daemon's rights (its uid, or root; fence.ownRights) and refused
// with EACCES for any other, who natively might have been allowed there: the
// daemon does not redo the kernel's permission checks. A link leading out of SOURCE
// is shown as what it leads to and followed by the daemon, through directories the
// kernel checked nothing against: for a caller without the daemon's rights, every
// open (files, listings, xattr reads, writes) of something found anywhere but at
// its own place in SOURCE needs every directory above it (from SOURCE down when it
// lies in SOURCE, from "/" otherwise) to be searchable by the caller, judged as
// the kernel would without capabilities: the modes, the directories' access ACLs
// and the caller's supplementary groups (read from /proc/TID/status of the calling
// thread, which cannot exit or change them while its request is unanswered;
// node.reachable, searcher.canSearch). Where the groups cannot be read (a caller
// in a PID namespace the daemon does not see) a group the caller might be in
// counts only where the others' bits agree, erring towards no. Refused: EACCES and
// an audit record (rule unreachable). Before 2026-12-01 the groups were never read
// and any ACL counted as no (TestLinkOutGroupsAndACLs). Before this check (fixed
// 2026-11-30), any user able to make a symlink in SOURCE read world-readable files
// inside other users' private directories through a root mount
// (TestConfusedDeputyLinkOut). Lookups and
// getattr of such objects are judged the same way (node.lookup), and on a mount
// other users see the link's own name, the entry point, is never cached by the
// kernel (zero entry and attribute timeouts; a READDIRPLUS answers it as a plain
// entry): a dentry made for root would let the next caller walk through it without
// a request. Below the entry point the kernel checks each caller against the modes
// the mirror shows, as anywhere. Before this (fixed 2026-11-30, the same test),
// any user could learn the existence, size, owner, mode and times of names inside
// other users' private directories through such a link. What it costs: one LOOKUP
// per walk through a link that leaves SOURCE, on shared mounts only. Every
// mutation's decision (judge) checks the same for its re-resolved target, so a
// truncate(2), utimes, xattr change or new name through such a link is refused to
// a caller who could not reach it even where a lookup let the caller through.
// TestConfusedDeputyNames
// (every name-adding operation in a swapped directory; unlink, rename, exchange in a
// sticky one; a create through a hidden link; each fails without its check, the
// rename destinations aside).
// TestFIFOAtAFilesPlace: a FIFO found at a file's place leaves the caller waiting
// in the kernel's FIFO code, not the daemon (it fails without O_NONBLOCK). These
// checks narrow a race to the microseconds between the check and the call; they
// cannot close it: no system call removes a name only if it is a given inode.
//
// POSIX ACLs. The kernel's permission check (default_permissions) sees the
// modes the mirror shows; an ACL can deny a named user what the "other" bits
// allow, or grant what they do not. On a mount other users see, the fence asks
// for FUSE_POSIX_ACL: the kernel reads each object's ACL through GETXATTR
// (system.posix_acl_access, the host's own) and checks every caller against it,
// as on the host. Before this (fixed 2026-11-30), a root toh-mount let any user
// read files and list directories whose ACL denied that user (TestACLsEnforced,
// which also checks a grant beyond the modes). The cost falls on callers other
// than an object's owner: the kernel asks (GETXATTR) for the ACL of each directory
// and file such a caller walks through or opens, and keeps the answer only
// briefly (two or three GETXATTRs for every cat by nobody of a file in the mount
// root, measured with --debug). An owner's checks never consult the ACL, so a
// tree used by its owner, as in bench/, pays nothing. ACLs are
// changed through the mount as xattrs, fenced as xattr changes; the host file
// system keeps modes and ACLs in step. Known difference: a file created through
// the mount in a directory with a default ACL gets the caller's umask applied as
// well (the kernel applies it before asking the daemon), so it can come out more
// restrictive than natively, never less. The daemon's own checks of directories
// outside the mirror (searcher.canSearch) read their ACLs too.
//
// Protected symlinks. With the host's fs.protected_symlinks on (read at mount),
// the kernel follows a symlink in a sticky world-writable directory only for the
// link's owner, or when the directory's owner owns the link too, root included.
// The mirror shows a link that leaves SOURCE as what it leads to, so the daemon,
// not the kernel, follows it: the fence applies the same rule to the caller of
// every lookup, getattr and create through such a link (fence.ownerOnly). Before
// this (fixed 2026-11-30), a user who could plant a link in a shared sticky
// directory inside SOURCE led root's writes through the mount wherever the link
// pointed, within the writable roots (TestProtectedSymlinks; where the host has
// the setting off, as this machine does, the test switches the fence's copy on).
// Links shown as links are followed by the kernel, which applies the rule itself.
// fs.protected_regular and fs.protected_fifos (O_CREAT opens of existing files in
// such directories) the kernel checks on the mount itself, against the attributes
// the mirror shows.
//
// It does not protect against: writes that do not go through the mount (the same
// process writing SOURCE directly: confine it with toh-exec); a directory moved out
// of a writable root after the fence opened it (descriptors follow it, as in
// canon); hard links to outside files made before or outside the fence (refused
// for writing, as above, but readable); mount points inside a root, which are
// crossed like directories; a file's content read between a check and its use by
// the caller (reads are not confined at all).
//
// # Platform support
//
// Linux only (the package builds elsewhere but offers only the audit log reader
// and the rule vocabulary). Root mounts directly; other users mount through
// fusermount3 and need read-write access to /dev/fuse.
//
// # Limitations
//
//   - A symlink the kernel still holds as a link while the fence would now show it
//     as what it leads to (renamed through the mount to a depth where its text
//     would leave the mount, hard-linked, or just made with a text that leaves it)
//     answers readlink with ESTALE: the kernel then looks its path up again once
//     (LOOKUP_REVAL) and gets the shown object, so a command sees no error. It was
//     EIO until the entry expired (found by review). Readlink judges the text each
//     time: the kernel must never cache link texts (CAP_CACHE_SYMLINKS), or it
//     would follow such a link out of the mount without asking.
//   - Record locks (fcntl, flock) are kept by the kernel for the mount: they work
//     between processes using the mount, but processes using SOURCE directly do not
//     see them.
//   - SOURCE itself replaced on the host (renamed away and another directory made
//     at its path) is another directory than the one mounted: the mount answers
//     ESTALE from then on (its root is no longer that inode); restart toh-mount.
//     Any other directory replaced on the host answers ESTALE once per path, and
//     the kernel looks the path up again (see Threat model). GETATTR does the same
//     for any node whose name now holds another object, so a descriptor still open
//     on the old one (O_PATH, a directory) gets ESTALE from fstat rather than the
//     new object's attributes (TestGetattrOfReplacedName).
//   - An open directory that is removed or replaced answers fstat with ENOENT
//     (directories have no host descriptor; go-fuse issue 55).
//   - xattrs of a symlink itself cannot be changed (EOPNOTSUPP), for want of a call
//     that does so through a descriptor before Linux 6.13.
//   - Directory aliases: a symlink shown as the directory it leads to (one out of
//     SOURCE, reached twice, or leading back into SOURCE from outside) is the same
//     inode to the kernel under each name, which moves the one dentry between the
//     names as they are used. rm -r of such a name descends into what it leads to
//     (each removal judged where it lands) before its rmdir removes the link.
//   - A shown link that was hard-linked through the mount is shown as what it leads
//     to from then on (it has two names); readlink of a name the kernel still
//     holds as the link answers ESTALE, as above.
//   - Creating at the name of a hidden escaping link that leads nowhere creates its
//     target (where the policy allows it), as open(2) with O_CREAT does on the host;
//     with O_EXCL it fails with EEXIST, also as on the host.
//   - Kernel requests go-fuse answers itself when a node does not implement them:
//     STATX (ENOSYS, so the kernel falls back to GETATTR for the mount), O_TMPFILE
//     (EOPNOTSUPP), and ACCESS (checked against the attributes; without
//     default_permissions, access(W_OK) does not predict a denial by the fence).
//   - Each mutation costs a canonicalization (one openat2 when the path holds no
//     symlink, else one lstat per path component) and one stat of the policy file;
//     reads cost what go-fuse's loopback costs. bench/fuse.sh measures both.
//   - A read-write open of a file that is open for reading elsewhere through the
//     mount, or whose creating write-only descriptor is still open, fails with
//     ETXTBSY while passthrough is in use (see ioMode).
//   - A write through a write-only descriptor clears set-user-ID and set-group-ID
//     bits for every writer, root included (FUSE_WRITE_KILL_SUIDGID, which would
//     tell, does not reach the fence through go-fuse's API); so does an O_TRUNC
//     open where the kernel does not take FUSE_HANDLE_KILLPRIV_V2, and a write by
//     root to a set-ID file that also carries security.capability (the kernel's
//     request to drop the capability comes as the same empty SETATTR). After an
//     O_TRUNC open or a direct write clears them, stat through the mount may show
//     the bits until the attribute timeout (the answer carries no attributes).
//   - Directory offsets (telldir, d_off) are the host's: on ext4 64-bit hash values,
//     which 32-bit programs built without large-file support cannot hold (readdir
//     fails with EOVERFLOW), as through go-fuse's loopback; the host gives such
//     programs 32-bit hashes itself, but the daemon is the host's caller here. A
//     listing read over several getdents calls shows the host directory as it is
//     at each call, as a host listing does, not as it was at opendir.
package fusefence
