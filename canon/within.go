package canon

import (
	"os"
	"path/filepath"
)

// WritableRoots returns the canonical spelling of each candidate, in order, without
// duplicates (the first occurrence wins). Candidates that are "" or relative are
// dropped before canonicalization: an unset $TMPDIR must not become the working
// directory, and a root that depends on the process's cwd is a policy bug, not a
// root. Which candidates to pass for a mode is the policy's decision.
func WritableRoots(candidates []string) []string {
	var roots []string
	seen := make(map[string]bool, len(candidates))
	for _, c := range candidates {
		if c == "" || !filepath.IsAbs(c) {
			continue
		}
		r := Canonical(c)
		if !filepath.IsAbs(r) || seen[r] {
			continue
		}
		seen[r] = true
		roots = append(roots, r)
	}
	return roots
}

// LexicallyWithin reports whether path is root or lies below it, comparing strings
// only: path == root, or root+"/" is a prefix of path; the root "/" contains every
// absolute path. It never touches the file system, so it is only meaningful on
// canonical spellings (see [Canonical]).
//
// Both arguments must be absolute and clean. Anything else is contained in nothing
// and contains nothing: cleaning here would turn "root/link/../x" into "root/x", the
// very mistake canonical spellings exist to avoid.
func LexicallyWithin(path, root string) bool {
	if !isCleanAbs(path) || !isCleanAbs(root) {
		return false
	}
	if root == "/" || path == root {
		return true
	}
	return len(path) > len(root) && path[len(root)] == '/' && path[:len(root)] == root
}

// isCleanAbs reports whether p is absolute and filepath.Clean(p) == p: "/", or
// names that are neither empty, "." nor "..", each after one slash. It scans
// instead of cleaning: the fence asks it several times per mutation.
func isCleanAbs(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	if p == "/" {
		return true
	}
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch p[start:i] {
		case "", ".", "..":
			return false
		}
		start = i + 1
	}
	return true
}

// Within reports whether unsafePath is root or lies below it, as far as the file
// system can tell right now.
//
// The canonical spellings are compared first (see [LexicallyWithin]). If that fails,
// the path's existing ancestors, the path itself first, are compared by identity
// (device and inode) with root, so an alias of root that is not a symlink (a bind
// mount) still counts. A path that passes through an existing non-directory
// ("file/x") is never contained, whatever its spelling. If root does not exist only
// the spelling counts.
func Within(unsafePath, root string) bool {
	p := canonicalize(unsafePath)
	if p.throughNonDir {
		return false
	}
	r := Canonical(root)
	if LexicallyWithin(p.path, r) {
		return true
	}
	if !filepath.IsAbs(p.existing) || !filepath.IsAbs(r) {
		return false
	}
	rootInfo, err := os.Stat(r)
	if err != nil {
		return false
	}
	for a := p.existing; ; a = filepath.Dir(a) {
		if fi, err := os.Stat(a); err == nil && os.SameFile(fi, rootInfo) {
			return true
		}
		if a == "/" {
			return false
		}
	}
}
