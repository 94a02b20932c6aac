package policy

import (
	"sync"
)

// Watcher keeps the execution policy of a long-running reader (toh-mount) current.
// Every call to [Watcher.Current] stats the policy file (one stat(2), no read) and, when
// its identity or content stamp changed since the last resolution, loads and resolves
// it again. A change therefore applies to the next call after it lands, with no
// polling interval and no inotify watch that could miss an atomic replace.
//
// The stamp is (exists, dev, ino, size, mtime, ctime) on Unix systems and (exists,
// size, mtime) elsewhere. Update's atomic replace always changes the inode; an
// in-place edit changes size or ctime. A reload that races a write stores the stamp
// taken before the read, so the next call sees a different stamp and reloads again:
// the watcher can read a file twice, never miss its last version.
//
// The policy is resolved as toh-exec resolves it, [Execution.WithWorktreeRoots]
// included: a linked worktree's common git directory is writable, its hooks and
// configuration protected like any git directory's (see [Execution.ProtectedPaths]).
//
// A missing file resolves as [Default], and the request's PolicyFile stays set, so a
// fence can refuse to create a policy file where none exists yet. A malformed file,
// or one that no longer resolves (an unknown session), makes Current return the error
// until a valid file returns: callers must fail closed on it. The watcher never
// falls back to the last good policy: a broken file is loud, not silently ignored.
type Watcher struct {
	path     string
	req      Request
	onChange func(Execution, error)

	mu  sync.Mutex
	key fileStamp
	x   Execution
	err error
	gen uint64
}

// NewWatcher resolves req against the policy file at path and returns a watcher
// for it. req.PolicyFile is set to path. onChange, if not nil, is called after every
// reload (with the new execution or the error) under the watcher's lock, so calls
// are serialized and in order; it must not call the watcher.
//
// A file that is malformed at start is an error: a fence must refuse to start on it.
func NewWatcher(path string, req Request, onChange func(Execution, error)) (*Watcher, error) {
	req.PolicyFile = path
	w := &Watcher{path: path, req: req, onChange: onChange}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reload(statStamp(path))
	if w.err != nil {
		return nil, w.err
	}
	return w, nil
}

// Path is the policy file's path as given to NewWatcher.
func (w *Watcher) Path() string { return w.path }

// Current returns the execution policy as of now and its generation, a counter that
// grows by one on every reload. err is non-nil while the file is malformed or does
// not resolve; the Execution is then the zero value and must not be used.
func (w *Watcher) Current() (x Execution, gen uint64, err error) {
	k := statStamp(w.path)
	w.mu.Lock()
	defer w.mu.Unlock()
	if k != w.key {
		w.reload(k)
	}
	return w.x, w.gen, w.err
}

// Refresh loads and resolves the file again even though it has not changed, and
// starts a new generation: for a caller whose way of resolving paths changed (a
// fence that now serves a mount, see canon.Mirror).
func (w *Watcher) Refresh() {
	k := statStamp(w.path)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reload(k)
}

func (w *Watcher) reload(k fileStamp) {
	w.key = k
	w.gen++
	w.x, w.err = Execution{}, nil
	f, _, err := Load(w.path)
	if err == nil {
		w.x, err = Resolve(f, w.req)
		w.x = w.x.WithWorktreeRoots() // its reader (the fence) honours ProtectedPaths
	}
	if err != nil {
		w.x, w.err = Execution{}, err
	}
	if w.onChange != nil {
		w.onChange(w.x, w.err)
	}
}
