// Package canon owns toh's notion of a path: canonical spelling, the writable roots of
// an execution policy, containment, and fd-relative resolution beneath a root.
//
// Every confinement decision in toh (bwrap binds, Landlock rules, Seatbelt subpaths, the
// FUSE fence) is made on paths produced here, so the shell family and the file family
// can never disagree about what "inside the workspace" means.
//
// # Canonical paths
//
// [Canonical] resolves symlinks component by component the way the kernel walks a
// path, like realpath(3): "link/.." is the parent of the link's target, not the
// directory holding the link. A path that does not exist is canonicalized through its
// deepest existing ancestor with the missing suffix appended, so the key is stable
// across the creation of the missing parts. A path that cannot be resolved keeps its
// spelling from the unresolvable component on, and so matches nothing real.
//
// Decisions the spec leaves open, taken so that Canonical is idempotent
// (Canonical(Canonical(p)) == Canonical(p), which the fuzz target checks):
//
//   - ".." in a missing suffix first cancels missing names; once they are used up it
//     continues the physical walk from the deepest existing directory. That is what
//     the kernel will do once the missing directories exist, so the key does not move
//     when they are created.
//   - After an existing non-directory ("file/x", "file/.."), the rest is kept
//     lexically and ".." cannot climb back over the file. The kernel refuses such
//     paths (ENOTDIR); [Within] never counts them as contained.
//   - When a component cannot be resolved (a symlink loop, EACCES, a name too long),
//     the result is the canonical prefix before it, the component, and the rest
//     cleaned with ".." unable to climb over that component. Cleaning the whole
//     spelling instead would let "loop/../x" stand for "x", a place the kernel never
//     reaches through it, and would not be idempotent.
//   - The kernel allows 40 symlinks per lookup; Canonical allows 40 per component of
//     the caller's path. Every path the kernel resolves resolves the same way here,
//     and a few it refuses for too many links in total ("c/l0/../c/l0" with a
//     40-link chain) still get a key. With one budget per lookup, the failure
//     spelling of such a path would resolve on the second call, since the links
//     spent before the failing component are gone from it. Work stays bounded: a cap
//     of 65536 lookups per call, past which the path counts as unresolvable.
//   - Canonical("") is "", never the working directory. A relative path is made
//     absolute with os.Getwd; if that fails the cleaned relative spelling is returned.
//     Neither is absolute, and non-absolute paths are contained in nothing.
//
// A process that serves a FUSE mirror of one tree at another place registers it
// ([ServeMirror]); from then on its Canonical looks every name below the mountpoint
// up below the mirrored tree instead, so it never sends a lookup to itself (see
// [Mirror]). [CanonicalAvoiding] instead reports a path that leads into a given file
// system. [EachLink] is the same walk for callers that judge the links on the way,
// not only where they lead (who could retarget one: toh-mount's mountpoint as root;
// which names lead into a protected tree: the policy's git directories), so that
// toh has one path walk, not one per question.
//
// # Writable roots and containment
//
// [WritableRoots] canonicalizes and dedupes (first occurrence wins); "" and relative
// candidates are dropped, so an unset $TMPDIR or a cwd-relative entry never turns the
// working directory into a root.
//
// [LexicallyWithin] compares strings only and fails closed: an argument that is not
// absolute and clean is contained in nothing and contains nothing, rather than being
// cleaned (which would reintroduce the "link/.." mistake).
//
// [Within] has a lexical fast path (equal, or root+"/" is a prefix; "/" contains
// everything) and an identity fallback that walks the path's existing ancestors and
// compares (dev, ino) with the root, so an alias spelling of a root (a bind mount, a
// second symlink) still counts. A path whose ancestor is a regular file is never
// contained.
//
// # Resolution beneath a root
//
// [OpenRoot] opens the trusted root once; [OpenBeneath] and [OpenParentBeneath] then
// resolve untrusted paths relative to that fd. The path is cleaned lexically first and
// any ".." left at its start is an escape (EXDEV); since no symlink may be followed,
// the lexical ".." is the physical one wherever the path exists. Both mechanisms
// (openat2 and the walk) return the same results and the same errnos: ELOOP for a
// symlink or magic link anywhere, EXDEV for an escape, ENOENT, ENOTDIR. Errors are
// [*PathError] values naming the operation and the path; errors.Is sees the errno.
//
// # Threat model
//
// Path strings are checks, not capabilities: anything decided on a string can be
// invalidated by a rename or a symlink swap before it is used. Callers that mutate
// must re-resolve right before the mutation and perform it relative to a directory fd
// obtained with [OpenBeneath] or [OpenParentBeneath], which refuse to leave their root
// and refuse symlinks and magic links on the way. The tests race
// renameat2(RENAME_EXCHANGE) of a directory and a symlink to outside against
// OpenParentBeneath and accept only "created inside" or ELOOP.
//
// What the fd functions do not protect against: a directory moved out of the root
// after it was opened (the fd follows it; so does any fd), the final component of
// OpenParentBeneath (the caller's *at call resolves it, so it must not follow it:
// O_NOFOLLOW, AT_SYMLINK_NOFOLLOW), hard links to files outside the root placed
// inside it (the same inode, legitimately reachable), and mount points inside the
// root (crossed like directories; openat2's RESOLVE_NO_XDEV is not used because
// workspaces legitimately contain mounts).
//
// # Platform support
//
// Linux and other Unix systems (darwin is built and vetted, not tested here).
// Linux uses openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS
// and falls back to a component walk with O_NOFOLLOW where openat2 is missing (ENOSYS,
// remembered) or refused (EPERM from a seccomp filter, retried per call because a
// filter can arrive later). Directory fds are O_PATH on Linux. Other Unix systems
// always use the walk, with O_RDONLY|O_DIRECTORY directory fds, which need read
// permission on every directory on the way.
//
// # Limitations
//
// Canonical and Within read the live file system and are only as true as the moment
// they ran. They do not protect against a concurrent attacker; OpenBeneath does.
// Within's identity fallback costs one stat per ancestor of the path.
package canon
