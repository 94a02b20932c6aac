package fusefence

import (
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dirCache keeps, for a directory node, the host directory hostParent opened for
// it, so that reads of its entries (LOOKUP, GETATTR, READLINK, OPEN) need no new
// walk from "/" each. An entry is used only while the node's host spelling is the
// one it was opened for and for at most the mount's cache timeout after that
// walk, the bound the kernel's own entry and attribute caches already give: a
// directory moved on the host is read at its old place for at most that long,
// as a cached entry would be shown. Only reads use it; every mutation resolves
// its target again (see judge). The descriptor is O_PATH, opened by the same
// walk that follows no symlink and never enters this mount, so what it shows is
// what hostParent would have shown at that moment.
//
// Descriptors are bounded: at most maxCachedDirs across the mount, each closed
// when its node is forgotten, replaced, or found expired by the sweeper.
type dirCache struct {
	mu    sync.RWMutex // held for reading while fd is in use
	fd    int          // O_PATH directory; valid only with ok
	ok    bool
	key   string // the host spelling of the directory when it was opened
	path  string // its canonical host path then
	until time.Time
}

// maxCachedDirs bounds the descriptors all dirCaches of one mount hold, far below
// the usual descriptor limit; past it, reads open and close as without the cache.
const maxCachedDirs = 1024

// dirCaches counts and sweeps one mount's cached directories.
type dirCaches struct {
	n    atomic.Int32
	mu   sync.Mutex
	live map[*dirCache]struct{}
}

// get returns the cached directory for the host spelling key, held for reading
// (the caller releases it through hostParentDir.close), or false.
func (c *dirCache) get(key string, now time.Time) (hostParentDir, bool) {
	c.mu.RLock()
	if c.ok && c.key == key && now.Before(c.until) {
		return hostParentDir{fd: c.fd, path: c.path, held: c}, true
	}
	c.mu.RUnlock()
	return hostParentDir{}, false
}

// cacheDir installs p (a fresh hostParent result with a descriptor) in c for key
// and returns it held like get's. It returns p unchanged, the caller keeping
// ownership, when the mount's cache is full.
func (f *fence) cacheDir(c *dirCache, key string, p hostParentDir, until time.Time) hostParentDir {
	dc := &f.dirs
	c.mu.Lock()
	if !c.ok {
		if dc.n.Add(1) > maxCachedDirs {
			dc.n.Add(-1)
			c.mu.Unlock()
			return p
		}
		dc.mu.Lock()
		if dc.live == nil {
			dc.live = map[*dirCache]struct{}{}
		}
		dc.live[c] = struct{}{}
		dc.mu.Unlock()
	} else {
		unix.Close(c.fd)
	}
	c.fd, c.ok, c.key, c.path, c.until = p.fd, true, key, p.path, until
	c.mu.Unlock()
	// Used under the read lock like any cached entry; a concurrent replacement
	// waits for it.
	c.mu.RLock()
	if c.ok && c.fd == p.fd {
		return hostParentDir{fd: c.fd, path: c.path, base: p.base, held: c}
	}
	c.mu.RUnlock()
	// Replaced (and our descriptor closed) in between: a walk of our own.
	return hostParentDir{fd: -1, path: p.path, base: p.base}
}

// dropDir closes c's descriptor, if any.
func (f *fence) dropDir(c *dirCache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok {
		return
	}
	unix.Close(c.fd)
	c.ok = false
	f.dirs.n.Add(-1)
	f.dirs.mu.Lock()
	delete(f.dirs.live, c)
	f.dirs.mu.Unlock()
}

// sweepDirs closes every descriptor expired at now, so an idle mount holds none
// for long.
func (f *fence) sweepDirs(now time.Time) {
	f.dirs.mu.Lock()
	live := make([]*dirCache, 0, len(f.dirs.live))
	for c := range f.dirs.live {
		live = append(live, c)
	}
	f.dirs.mu.Unlock()
	for _, c := range live {
		c.mu.RLock()
		old := c.ok && !now.Before(c.until)
		c.mu.RUnlock()
		if old {
			f.dropDir(c)
		}
	}
}

// sweepLoop sweeps once per timeout until stop is closed.
func (f *fence) sweepLoop(stop <-chan struct{}) {
	t := time.NewTicker(f.timeout)
	defer t.Stop()
	for {
		select {
		case <-stop:
			f.sweepDirs(time.Now().Add(24 * time.Hour))
			return
		case now := <-t.C:
			f.sweepDirs(now)
		}
	}
}

// hostParentIn is hostParent for an entry of the directory node dir (nil when
// unknown), through dir's cache. The directory found must be dir's inode (see
// isNode): the kernel checked the caller's search permission against dir's cached
// attributes, and a directory put at dir's name on the host since (a user's own
// renamed away, root's private one moved in) would otherwise show the caller its
// entries, and open them when their own modes allow. ESTALE then, on which the
// kernel looks the path up again. A cached descriptor is dir's by construction.
func (f *fence) hostParentIn(dir *node, rel string) (hostParentDir, syscall.Errno) {
	if dir == nil {
		return f.hostParent(rel)
	}
	key := f.host(parentRel(rel))
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	now := time.Now()
	if f.timeout > 0 {
		if p, ok := dir.dirc.get(key, now); ok {
			p.base = base
			return p, 0
		}
	}
	p, errno := f.hostParent(rel)
	if errno != 0 {
		return p, errno
	}
	if errno := dir.holdsDir(p); errno != 0 {
		p.close()
		return hostParentDir{}, errno
	}
	if p.fd < 0 || f.timeout <= 0 {
		return p, 0
	}
	return f.cacheDir(&dir.dirc, key, p, now.Add(f.timeout)), 0
}

// holdsDir checks that p, the host directory just found for n's entries, is n's
// inode (see isNode).
func (n *node) holdsDir(p hostParentDir) syscall.Errno {
	var st unix.Stat_t
	var gen uint64
	var err error
	if p.fd >= 0 {
		gen, err = statxFd(p.fd, &st)
	} else {
		gen, err = statxNoLinks(p.path, false, &st)
	}
	if err != nil {
		return toErrno(err)
	}
	if !n.isNode(&st, gen) {
		return n.stale()
	}
	return 0
}
