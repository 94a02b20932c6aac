package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
)

// ProbeCache stores the runner chain's verdict across toh-exec invocations so that the
// hot path runs no probe (SPEC §4.1).
//
// # Key
//
// A verdict is valid only for the exact state it was measured on: the kernel release
// and version, the effective uid, the sysctls that decide whether unprivileged user
// namespaces work, the identity (dev, ino, size, mtime, ctime) of every runner binary
// in the chain and of the toh-exec binary itself. Any difference is a miss.
//
// # Threat model
//
// The cache must live where confined commands cannot write: the caller picks a path
// outside the usual workspaces (/var/cache/toh for root, /run/user/<uid>/toh else),
// [Chain.Confine] ignores (neither reads nor writes) a cache that lies inside one of
// the run's writable roots, and the bwrap rung rebinds the cache file read-only like
// the policy file, a missing one through a stand-in when its directory exists and the
// caller may write there (bwrap_argv.go, missingGuardable): that is the common case,
// since the run before dropped it. While such a run lasts (it holds the directory's
// lock, holdCacheDir), other calls store no verdict over the name and drop one by
// emptying the file in place, since a rename or an unlink would detach the rebind
// inside the running sandbox (Linux since 3.18). Were it poisoned anyway, a verdict
// only ever chooses among providers that confine, or says "unavailable": it can deny
// service or pick Landlock over bwrap (which then reports its own enforcement
// honestly), never run a command unconfined. A runner failure at run time drops the
// cache, and so does every run whose writable roots held it ([Chain.ForgetIfWritable]):
// its command could have written a verdict, which must not choose the runner of a later
// call (a call with other roots would read it). Only a call that runs at the same time
// as such a run (under Landlock, which cannot keep the name read-only) can still read
// what its command wrote. The file is read only if it is a regular file of the caller's
// own with one link and not a link itself (a planted FIFO would hold every call), in a
// directory of the caller's own that it alone may write (one made read-only would keep
// a planted verdict from being dropped; one opened to another user, by its mode or an
// ACL, would let that user put one back), and the directory is reached, read, written
// and dropped from without following a symlink (openat2 RESOLVE_NO_SYMLINKS): a link
// planted in its place would otherwise choose where later calls read the verdict and
// write theirs. A cache path through a symlink (a linked ~/.cache) therefore caches
// nothing, and every call probes.
type ProbeCache struct {
	Path string
}

// maxCacheBytes bounds what is read as a cache file; a verdict is a few hundred bytes.
const maxCacheBytes = 64 << 10

var errNotACache = errors.New("not a probe cache file")

type cacheFile struct {
	Version int          `json:"version"`
	Key     string       `json:"key"`
	Backend Backend      `json:"backend"` // "" means no candidate passed
	Probes  []cacheProbe `json:"probes"`
}

type cacheProbe struct {
	Backend Backend `json:"backend"`
	Error   string  `json:"error,omitempty"`
}

// load returns the cached verdict for key, ok=false on any miss or damage.
func (c *ProbeCache) load(key string) (cacheFile, bool) {
	if c == nil || c.Path == "" {
		return cacheFile{}, false
	}
	b, err := readCacheFile(c.Path)
	if err != nil {
		return cacheFile{}, false
	}
	return parseCacheFile(b, key)
}

// parseCacheFile accepts exactly what store writes for version 1 and key: encoding/json's
// output for cacheFile, fields in their order, no white space, nothing after it.
// Anything else is a miss, so the chain probes again and replaces the file. It runs on
// every confined call; a reflection-based json decode cost ~0.1 ms of each (bench/).
func parseCacheFile(b []byte, key string) (cacheFile, bool) {
	p := cacheParser{b: b}
	f := cacheFile{Version: 1}
	var ok bool
	if !p.lit(`{"version":1,"key":`) {
		return cacheFile{}, false
	}
	if f.Key, ok = p.str(); !ok || f.Key != key {
		return cacheFile{}, false
	}
	if !p.lit(`,"backend":`) {
		return cacheFile{}, false
	}
	backend, ok := p.str()
	if !ok || !p.lit(`,"probes":`) {
		return cacheFile{}, false
	}
	f.Backend = Backend(backend)
	switch {
	case p.lit("null"):
	case p.lit("[]"):
		f.Probes = []cacheProbe{}
	case p.lit("["):
		for {
			if !p.lit(`{"backend":`) {
				return cacheFile{}, false
			}
			name, ok := p.str()
			if !ok {
				return cacheFile{}, false
			}
			cp := cacheProbe{Backend: Backend(name)}
			if p.lit(`,"error":`) {
				if cp.Error, ok = p.str(); !ok {
					return cacheFile{}, false
				}
			}
			if !p.lit("}") {
				return cacheFile{}, false
			}
			f.Probes = append(f.Probes, cp)
			if p.lit("]") {
				break
			}
			if !p.lit(",") {
				return cacheFile{}, false
			}
		}
	default:
		return cacheFile{}, false
	}
	if !p.lit("}") || p.i != len(b) {
		return cacheFile{}, false
	}
	return f, true
}

// cacheParser reads the probe cache's JSON from the front.
type cacheParser struct {
	b []byte
	i int
}

// lit consumes s if the input continues with it.
func (p *cacheParser) lit(s string) bool {
	if !bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		return false
	}
	p.i += len(s)
	return true
}

// str consumes one JSON string. One without escapes is taken as it is (it must be
// what json.Marshal leaves unescaped: valid UTF-8, no control character); one with
// escapes is decoded by encoding/json, which validates them.
func (p *cacheParser) str() (string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	escaped := false
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '\\':
			escaped = true
			j++ // the escaped byte cannot end the string
		case c == '"':
			tok := p.b[p.i : j+1]
			p.i = j + 1
			if escaped {
				var s string
				if json.Unmarshal(tok, &s) != nil {
					return "", false
				}
				return s, true
			}
			raw := tok[1 : len(tok)-1]
			if !utf8.Valid(raw) {
				return "", false
			}
			return string(raw), true
		case c < 0x20:
			return "", false
		}
	}
	return "", false
}

// store writes the verdict atomically, through the directory's descriptor (see
// openCacheDir). Failing to store is not an error of the run: the next invocation
// probes again.
func (c *ProbeCache) store(f cacheFile) error {
	if c == nil || c.Path == "" {
		return nil
	}
	dir, name := filepath.Dir(c.Path), filepath.Base(c.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating probe cache dir: %w", err)
	}
	dfd, err := openCacheDir(dir)
	if err != nil {
		return fmt.Errorf("probe cache dir: %w", err)
	}
	defer unix.Close(dfd)
	if !trustedCacheDir(dfd) {
		return fmt.Errorf("probe cache dir %s: %w", dir, errNotACache)
	}
	release, busy := holdCacheDir(dfd)
	if busy {
		return nil // a run keeps the name read-only now; the next call probes again
	}
	defer release()
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := fmt.Sprintf(".probe-cache-%x", rnd)
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("writing probe cache: %w", err)
	}
	file := os.NewFile(uintptr(fd), tmp)
	_, err = file.Write(b)
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("writing probe cache: %w", err)
	}
	return nil
}

// Drop removes the cache so that the next invocation probes again. One that cannot be
// removed (a command that could write its directory made it read-only, to keep a
// verdict of its own) is reported; while its directory stays that way it is no cache
// to later calls (trustedCacheDir), which then probe every time.
func (c *ProbeCache) Drop() error {
	if c == nil || c.Path == "" {
		return nil
	}
	dfd, err := openCacheDir(filepath.Dir(c.Path))
	if err != nil {
		return nil // no directory reached without links: nothing a later call reads
	}
	defer unix.Close(dfd)
	release, busy := holdCacheDir(dfd)
	if busy {
		// A bwrap run keeps the name read-only now, and removing it would detach
		// that. Empty the file in place instead: no mount is touched, and a verdict
		// a command wrote is gone all the same. The holder need not be such a run:
		// a Landlock run's command can hold the lock from a process it handed it
		// to, which must not keep its verdict from being dropped.
		return truncateCacheFile(dfd, filepath.Base(c.Path))
	}
	defer release()
	if err := unix.Unlinkat(dfd, filepath.Base(c.Path), 0); err != nil && err != unix.ENOENT {
		return fmt.Errorf("dropping the probe cache %s: %w", c.Path, err)
	}
	return nil
}

// truncateCacheFile empties the cache file name in dfd, when it is a regular file of
// the caller's with one link (never another file a command linked or pointed there);
// what is no such file is no verdict either (readCacheFile refuses it).
func truncateCacheFile(dfd int, name string) error {
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT || err == unix.ELOOP || err == unix.ENXIO {
			return nil
		}
		return fmt.Errorf("dropping the probe cache %s: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("dropping the probe cache %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != unix.Geteuid() || st.Nlink != 1 {
		return nil
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return fmt.Errorf("dropping the probe cache %s: %w", name, err)
	}
	return nil
}

// holdCacheDir takes the cache directory's flock exclusively, without waiting. Every
// bwrap run that keeps the cache read-only (its file rebound, or a stand-in at a
// missing one) holds that lock shared from before it looks until its command has
// exited (standins_linux.go), and renaming a verdict over the name, or removing it,
// while such a run lasts would detach the rebind inside its sandbox (Linux since
// 3.18) and let its command write the cache. So store and Drop leave the name alone
// while the directory is busy; holding the lock meanwhile, they make a run that
// starts wait the few milliseconds they take. A directory that cannot be opened for
// reading (no run can lock it either) or locked for another reason is not busy.
func holdCacheDir(dfd int) (release func(), busy bool) {
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return func() {}, false
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.EWOULDBLOCK {
		unix.Close(fd)
		return nil, true
	}
	return func() { unix.Close(fd) }, false
}

// openCacheDir opens the cache's directory (O_PATH, enough to reach, make and remove
// its entries) with no symlink on the way: a command that could once write there
// could point a link anywhere, and later calls would read their verdict from, and
// write it to, a place of its choosing. Without openat2 (off Linux, or before 5.6)
// there is no cache.
func openCacheDir(dir string) (int, error) { return canon.OpenNoSymlinks(dir, false) }

// trustedCacheDir reports whether the directory dfd is the caller's own and writable
// by the caller alone: one a command made read-only (to keep a verdict of its own
// from being dropped), or opened to a group, to everyone or, by a POSIX ACL, to
// another user (an ACL that grants write shows in the group bits, its mask) is not.
// Nothing here changes the directory: a --probe-cache in a shared directory (/tmp)
// is simply no cache.
func trustedCacheDir(dfd int) bool {
	var st unix.Stat_t
	if unix.Fstat(dfd, &st) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && int(st.Uid) == unix.Geteuid() &&
		st.Mode&0o200 != 0 && st.Mode&0o022 == 0
}
