package fusefence

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

// protSet is the protected set in force for a snapshot, and what it takes to
// resolve it again. A snapshot's first set is [protectedOf]'s: every git directory
// that exists then is protected (the git rule of [policy.Execution.ProtectedPaths]).
// Once the set is older than the bound, the next mutation resolves it again; a git
// directory (or .git pointer, or link to one) that was not protected before is
// protected from then on if it is at least the bound old, and otherwise stays the
// run's own until it is (git init and git clone must write the hooks and the
// configuration of the repository they make). So a repository made while the fence
// serves is protected from the first mutation after its first bound of life.
//
// A set only grows within a snapshot: a path once protected stays protected until
// the policy changes, whatever a later resolution finds. A resolution reads the
// tree the caller can change, and can come back short for reasons that are the
// caller's doing: a thousand empty directories in .git/worktrees past its limits,
// or the daemon's descriptors used up by files the caller holds open, so that the
// reads of .git fail (both found by review: the submodule's config was then
// writable). A repository moved or removed on purpose keeps its old names
// protected until the next policy generation (toh-mount: a policy change or a
// restart).
type protSet struct {
	g       guarded
	ver     uint64               // fence-wide, changes whenever the set does (see handle.gen)
	refresh time.Time            // resolve again at the first mutation from then on
	known   map[string]bool      // the git directories and pointers protected
	pending map[string]time.Time // young ones left out, with their birth (or first sighting)
}

// never is a refresh time no mutation reaches.
var never = time.Unix(1<<40, 0)

// protState is a snapshot's refreshable protected set.
type protState struct {
	mu  sync.Mutex // serializes resolutions
	cur atomic.Pointer[protSet]
}

// gitKey is what a protected path's protection hangs on: its git directory, or the
// pointer file or link itself; "" for entries that do not come from a repository.
func gitKey(pp policy.ProtectedPath) string {
	switch {
	case pp.GitDir != "":
		return pp.GitDir
	case pp.Reason == policy.ProtectGit:
		return pp.Path
	}
	return ""
}

// resolveProtected resolves x's protected set at now, against the previous set
// prev (nil for a snapshot's first). bound is how long a new repository stays the
// run's own, and how long a set is used before it is resolved again. nextVer
// numbers the result when it differs from prev.
func resolveProtected(x policy.Execution, prev *protSet, now time.Time, bound time.Duration, nextVer func() uint64, guard ...string) *protSet {
	next := &protSet{refresh: now.Add(bound), known: map[string]bool{}, pending: map[string]time.Time{}}
	if x.Mode != policy.WorkspaceWrite {
		next.refresh = never // nothing is guarded: never again
		next.ver = nextVer()
		return next
	}
	had := map[string]bool{}
	if prev != nil {
		// Everything protected before stays so, first and in its order, so that a
		// resolution that finds nothing new keeps the version (see protSet).
		next.g.protect = slices.Clone(prev.g.protect)
		next.g.policy = slices.Clone(prev.g.policy)
		next.g.except = maps.Clone(prev.g.except)
		next.g.heads = maps.Clone(prev.g.heads)
		for _, p := range slices.Concat(prev.g.protect, prev.g.policy) {
			had[p] = true
		}
		for key := range prev.known {
			next.known[key] = true
		}
	}
	for _, pp := range x.ProtectedPaths() {
		if key := gitKey(pp); key != "" {
			if prev != nil && !prev.known[key] {
				born, ok := prev.pending[key]
				if !ok {
					born = birth(key, now)
				}
				if now.Sub(born) < bound {
					next.pending[key] = born
					if r := born.Add(bound); r.Before(next.refresh) {
						next.refresh = r
					}
					continue
				}
			}
			next.known[key] = true
		}
		if !had[pp.Path] {
			next.g.add(pp)
		} else if pp.Reason != policy.ProtectPolicy {
			next.g.setExcept(pp) // a submodule initialised since stays writable
		}
	}
	for _, p := range guard { // Config.Guard, protected whatever the policy says
		if !had[p] && !slices.Contains(next.g.protect, p) {
			next.g.protect = append(next.g.protect, p)
		}
	}
	if prev != nil && slices.Equal(prev.g.protect, next.g.protect) && slices.Equal(prev.g.policy, next.g.policy) &&
		maps.EqualFunc(prev.g.except, next.g.except, slices.Equal) {
		next.ver = prev.ver
	} else {
		next.ver = nextVer()
	}
	return next
}

// birth is when the file at path came to be: its birth time where the file system
// records one, else now (the first time the fence saw it).
func birth(path string, now time.Time) time.Time {
	var x unix.Statx_t
	fd, err := canon.OpenNoSymlinks(path, true) // see statxNoLinks: never a lookup into the mount
	if err == unix.ENOSYS {
		err = unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &x)
	} else if err == nil {
		err = unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &x)
		unix.Close(fd)
	}
	if err != nil || x.Mask&unix.STATX_BTIME == 0 {
		return now
	}
	b := time.Unix(x.Btime.Sec, int64(x.Btime.Nsec))
	if b.After(now) {
		return now
	}
	return b
}

// protBound is how long a protected set is used before it is resolved again, and
// how long a repository made meanwhile stays the run's own: the kernel's cache
// timeout, or DefaultTimeout when caching is off (a new repository must outlive
// git init before it is protected).
func (f *fence) protBound() time.Duration {
	if f.timeout <= 0 {
		return DefaultTimeout
	}
	return f.timeout
}

// protected returns the snapshot's protected set, resolved again first when it is
// due (see protSet).
func (f *fence) protected(s *snapshot) *protSet {
	cur := s.prot.cur.Load()
	now := time.Now()
	if now.Before(cur.refresh) {
		return cur
	}
	s.prot.mu.Lock()
	defer s.prot.mu.Unlock()
	if cur = s.prot.cur.Load(); now.Before(cur.refresh) {
		return cur // another request resolved it meanwhile
	}
	next := resolveProtected(s.x, cur, now, f.protBound(), f.nextProtVer, f.guard...)
	if next.ver != cur.ver {
		f.logf("policy generation %d: protected paths now %q %q (new repositories still their run's own: %d)", s.gen, next.g.policy, next.g.protect, len(next.pending))
	}
	s.prot.cur.Store(next)
	return next
}

func (f *fence) nextProtVer() uint64 { return f.protVer.Add(1) }
