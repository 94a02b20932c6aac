package canon

import (
	"sync"
	"sync/atomic"
)

// A Mirror is a mount that this process serves itself (a FUSE daemon's own mount)
// and that shows, at Mountpoint, the tree at Source.
//
// While one is registered, [Canonical] and [Within] in this process never look a
// name up inside it. Such a lookup would be a request to the process itself, made
// perhaps from inside a request that holds, in the kernel, the very directory lock
// the lookup needs; the two would wait on each other forever. Instead a walk that
// reaches Mountpoint continues on Source: every lookup below Mountpoint is made on
// the same name below Source, which the mount mirrors name for name. The walk keeps
// the kernel's position in the mount's spelling, so ".." above the mount's root
// leads to Mountpoint's parent as it would through the mount, and the result is
// spelled on Source, where the mirrored file really is. So a policy root or a git
// directory named through the mount means the same host directory the mount shows,
// and nothing this process resolves ever lies inside its own mount.
//
// A walk that reaches the mount some other way (a bind mount of it elsewhere, seen
// by its device once [Mirror.SetDevice] has recorded it) cannot be translated: such
// a path canonicalizes to "", which is contained in nothing and contains nothing.
//
// [CanonicalAvoiding] is unaffected: its caller asked to be told (ok false) rather
// than translated.
type Mirror struct {
	Mountpoint, Source string // both canonical
	dev                atomic.Uint64
}

var (
	mirrorsMu sync.Mutex
	mirrors   atomic.Pointer[[]*Mirror] // copy on write; nil when none
)

// ServeMirror registers the mirror of source at mountpoint (both canonical, neither
// inside the other) until [Mirror.Forget]. Register before the mount serves its
// first request.
func ServeMirror(mountpoint, source string) *Mirror {
	m := &Mirror{Mountpoint: mountpoint, Source: source}
	mirrorsMu.Lock()
	defer mirrorsMu.Unlock()
	var next []*Mirror
	if cur := mirrors.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, m)
	mirrors.Store(&next)
	return m
}

// SetDevice records the mount's device once it is mounted, so that a walk reaching
// it by another path stops before looking anything up inside it.
func (m *Mirror) SetDevice(dev uint64) { m.dev.Store(dev) }

// Forget ends the registration (when the mount has ended). Calling it twice is
// harmless.
func (m *Mirror) Forget() {
	mirrorsMu.Lock()
	defer mirrorsMu.Unlock()
	cur := mirrors.Load()
	if cur == nil {
		return
	}
	var next []*Mirror
	for _, o := range *cur {
		if o != m {
			next = append(next, o)
		}
	}
	if len(next) == 0 {
		mirrors.Store(nil)
		return
	}
	mirrors.Store(&next)
}

// mirrorSet is the registered mirrors as of one walk's start.
type mirrorSet []*Mirror

func currentMirrors() mirrorSet {
	if cur := mirrors.Load(); cur != nil {
		return *cur
	}
	return nil
}

// host is the spelling on which to look up the canonical mount-space path p: Source
// and the rest when p is a mirror's Mountpoint or lies below it, else p itself.
func (ms mirrorSet) host(p string) string {
	// Bounded: a mirror's Source is never inside its own Mountpoint, but may be
	// inside another's.
	for range len(ms) {
		moved := false
		for _, m := range ms {
			if LexicallyWithin(p, m.Mountpoint) {
				p = m.Source + p[len(m.Mountpoint):]
				moved = true
				break
			}
		}
		if !moved {
			break
		}
	}
	return p
}

// served reports whether dev is a registered mirror's device.
func (ms mirrorSet) served(dev uint64) bool {
	for _, m := range ms {
		if d := m.dev.Load(); d != 0 && d == dev {
			return true
		}
	}
	return false
}

// HostSpelling is where this process looks up the canonical path p: on a mirror's
// source when p is its mountpoint or lies below it (see [Mirror]), else p itself.
// Code that walks paths itself, one lstat per component, spells each lookup this
// way to stay out of this process's own mounts as [Canonical] does.
func HostSpelling(p string) string { return currentMirrors().host(p) }
