package policy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/toh-sandbox/toh/canon"
	"golang.org/x/sys/unix"
)

// Limits of the git-structure reads. They bound what a hostile tree can make toh read
// before every run; no real repository comes near them.
const (
	maxGitFileBytes = 4096     // a .git pointer file, commondir, gitdir
	maxGitDirs      = 1024     // git directories belonging to one root
	maxModulesDepth = 16       // directory levels below <gitdir>/modules
	maxModulesReads = 4096     // directories read below all modules/ of one root
	maxConfigBytes  = 64 << 10 // a submodule git directory's config, read for core.worktree
)

// gitDirsOf returns the git directories that belong to the writable root r, in a
// stable order, and r's .git pointer file when .git is a file:
//
//   - r itself when it looks like a git directory (a bare repository, or the common
//     directory of a linked worktree added by [Execution.WithWorktreeRoots]);
//   - r/.git when it is a directory, or the directory a .git file ("gitdir: <path>")
//     names;
//   - the common directory of each of those (its commondir file), each per-worktree
//     directory <common>/worktrees/*, and every submodule git directory below
//     <gitdir>/modules of any git directory found, recursively.
//
// Pointers are followed here without the checks of [verifiedWorktree]: what this
// finds is only ever made read-only, never writable, so a planted pointer can at most
// make more paths read-only.
//
// links are the symbolic links that lead to those directories: r/.git when it is
// one, and the links that the text of a .git file or of a commondir passes through.
// Retargeting any of them would make git use another directory, so their own names
// are protected like the pointer file (see [linksOn]). Each linked worktree's
// gitdir back-pointer is listed with them.
//
// checkouts are the .git entries through which git reaches the submodule and linked
// worktree git directories found, spelled as git would resolve them: for a
// submodule's git directory M, <core.worktree of M's config.worktree or config>/.git,
// or, without one, <its parent's checkout>/<its name>/.git; for a worktree
// directory G, the path its back-pointer G/gitdir names. Each is listed only when
// the checkout directory it lies in exists. Rewritten ("gitdir: ../evil"), such a
// pointer makes git use a git directory of the command's own, hooks and
// configuration included, whenever the user's git enters the checkout: "git status"
// in the superproject enters every populated submodule (found by review). So they
// are protected like r's own pointer file.
//
// modules maps each git directory listed to the submodule git directories in use
// directly below its modules/ (below the directories a name with slashes makes),
// spelled as found: those whose checkout's .git leads to them. A stale one (its
// submodule deinitialised, or removed upstream) is left out.
//
// truncated reports that a limit (maxGitDirs, maxModulesDepth, maxModulesReads) cut
// the walk short: directories it did not reach are then not listed, and the caller
// must protect what holds them instead (a command can make a thousand directories in
// .git/worktrees or .git/modules to push a real submodule past the limits; found by
// review).
func gitDirsOf(r string) (dirs []string, pointer string, links, checkouts []string, modules map[string][]string, truncated bool) {
	var queue []string
	if looksLikeGitDir(r) {
		queue = append(queue, r)
	}
	dotgit := path.Join(r, ".git")
	if fi, err := os.Lstat(dotgit); err == nil {
		switch {
		case fi.IsDir():
			queue = append(queue, dotgit)
		case fi.Mode().IsRegular():
			pointer = dotgit
			if sp, ok := gitPointerSpelling(dotgit); ok {
				links = append(links, linksOn(sp)...)
				if g := canon.Canonical(sp); isDir(g) {
					queue = append(queue, g)
				}
			}
		case fi.Mode()&os.ModeSymlink != 0:
			// A .git symlink to a git directory: protect the directory it leads to,
			// and the link itself.
			links = append(links, linksOn(dotgit)...)
			if g := canon.Canonical(dotgit); isDir(g) {
				queue = append(queue, g)
			}
		}
	}
	// worktreeOf is where each git directory's checkout is, as spelled (r for the
	// root's own), and parentOf the git directory whose modules/ held a submodule's:
	// a submodule without core.worktree (after git submodule deinit, say) has its
	// checkout where its name says, below its parent's.
	worktreeOf := map[string]string{}
	for _, d := range queue {
		worktreeOf[d] = r
	}
	parentOf := map[string]string{}
	gitmodulesRead := map[string]bool{}
	seen := map[string]bool{}
	// How each queued directory was found: a submodule's or a worktree's git
	// directory has a checkout elsewhere.
	const (
		foundModule = 1 + iota
		foundWorktree
	)
	found := map[string]int{}
	modules = map[string][]string{}
	reads := 0
	for len(queue) > 0 && len(dirs) < maxGitDirs {
		d := queue[0]
		queue = queue[1:]
		if seen[d] {
			continue
		}
		seen[d] = true
		dirs = append(dirs, d)
		var checkout string // the spelling of the .git entry that leads to d
		switch found[d] {
		case foundModule:
			// config.worktree, where git reads it (extensions.worktreeConfig, as
			// git sparse-checkout sets), overrides config.
			wt, ok := configValue(d+"/config.worktree", "core", "worktree")
			if !ok || wt == "" {
				wt, ok = configValue(d+"/config", "core", "worktree")
			}
			if ok && wt != "" {
				worktreeOf[d] = spellFrom(d, wt)
			} else if pw, known := worktreeOf[parentOf[d]]; known {
				worktreeOf[d] = pw + "/" + strings.TrimPrefix(d, parentOf[d]+"/modules/")
			}
			if w, known := worktreeOf[d]; known {
				checkout = w + "/.git"
			}
		case foundWorktree:
			// The back-pointer says where the checkout is; rewritten, it would
			// have the next resolution protect a decoy's .git instead (found by
			// review). It is protected like a link on the way.
			links = append(links, d+"/gitdir")
			if b, ok := readSmall(d + "/gitdir"); ok {
				if p := strings.TrimRight(string(b), " \t\r\n"); p != "" {
					checkout = spellFrom(d, p)
					worktreeOf[d] = path.Dir(checkout)
				}
			}
		}
		if checkout != "" && isDir(canon.Canonical(path.Dir(checkout))) {
			checkouts = append(checkouts, checkout)
		}
		// The submodules its checkout's .gitmodules lists: a checkout whose .git is
		// a git directory of its own (git submodule add of an existing clone) is
		// one to protect, found nowhere else; a .git file, or none yet (a
		// submodule never initialised), is a pointer the user's git would follow
		// once populated (found by review). .gitmodules is the command's to write,
		// so it can only add protection, up to maxGitDirs names.
		if w, ok := worktreeOf[d]; ok && !gitmodulesRead[w] {
			gitmodulesRead[w] = true
			for _, p := range submodulePaths(w) {
				if len(checkouts) >= maxGitDirs {
					break // (not truncated: a long .gitmodules must not make .git read-only)
				}
				dotgit := w + "/" + p + "/.git"
				fi, err := os.Lstat(dotgit)
				switch {
				case err == nil && fi.IsDir() && isGitDirAt(dotgit):
					worktreeOf[dotgit] = w + "/" + p
					queue = append(queue, dotgit)
				case err == nil && fi.IsDir():
				case isDir(canon.Canonical(w + "/" + p)):
					checkouts = append(checkouts, dotgit)
				}
			}
		}
		if sp, ok := commonDirSpelling(d); ok {
			links = append(links, linksOn(sp)...)
			if c := canon.Canonical(sp); isDir(c) {
				queue = append(queue, c)
			}
		}
		for _, w := range subdirs(d + "/worktrees") {
			if !isGitDirAt(w) {
				continue // an empty or stray directory: git ignores it too
			}
			if found[w] == 0 {
				found[w] = foundWorktree
			}
			queue = append(queue, w)
		}
		ms, cut := moduleGitDirs(d+"/modules", 0, &reads)
		truncated = truncated || cut
		modules[d] = ms
		for _, m := range ms {
			if found[m] == 0 {
				found[m] = foundModule
				parentOf[m] = d
			}
			queue = append(queue, m)
		}
	}
	for _, d := range queue {
		if !seen[d] {
			truncated = true // left in the queue at maxGitDirs
			break
		}
	}
	for d, ms := range modules {
		modules[d] = slices.DeleteFunc(ms, func(m string) bool {
			w, ok := worktreeOf[m]
			return !ok || !leadsTo(w+"/.git", m)
		})
	}
	return dirs, pointer, links, checkouts, modules, truncated
}

// leadsTo reports whether the checkout's .git entry dotgit leads to the git
// directory m: a "gitdir:" file naming it, or a link to it.
func leadsTo(dotgit, m string) bool {
	m = canon.Canonical(m)
	if g, ok := readGitPointer(dotgit); ok {
		return g == m
	}
	return canon.Canonical(dotgit) == m
}

// moduleGitDirs walks a modules/ directory: submodule names may contain slashes, so a
// directory that is not a git directory is descended into; a git directory is
// returned (its own modules/ is walked when it is processed). truncated reports a
// limit reached.
func moduleGitDirs(dir string, depth int, reads *int) (out []string, truncated bool) {
	if depth > maxModulesDepth || *reads >= maxModulesReads {
		return nil, true
	}
	*reads++
	for _, s := range subdirs(dir) {
		if isGitDirAt(s) {
			out = append(out, s)
		} else {
			more, cut := moduleGitDirs(s, depth+1, reads)
			out = append(out, more...)
			truncated = truncated || cut
		}
	}
	return out, truncated
}

// subdirs lists the real (not symlinked) subdirectories of dir, sorted.
func subdirs(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, dir+"/"+e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// isGitDirAt reports whether the walk takes d, below a modules/ or worktrees/
// directory or a checkout, for a git directory: it looks like one, or it holds a
// file the walk protects in every git directory it finds (config, commondir, or a
// worktree's gitdir back-pointer). HEAD, objects/ and refs/ are the command's to
// remove: moving HEAD aside in one run once made the next run's walk pass the
// directory by and leave its config writable (found by review); what is protected
// cannot be removed, so once found, a git directory stays found.
func isGitDirAt(d string) bool {
	return looksLikeGitDir(d) || isRegular(d+"/config") || isRegular(d+"/commondir") || isRegular(d+"/gitdir")
}

// looksLikeGitDir reports whether d has what git itself requires of a git directory:
// a HEAD file, and objects/ and refs/ directories either in d or, for a linked
// worktree's directory, in the common directory its commondir names.
func looksLikeGitDir(d string) bool {
	if !isRegular(d + "/HEAD") {
		return false
	}
	common := d
	if c, ok := readCommonDir(d); ok {
		common = c
	}
	return isDir(common+"/objects") && isDir(common+"/refs")
}

// readGitPointer reads a .git file the way git's read_gitfile does: "gitdir: <path>",
// trailing white space dropped, a relative path taken relative to the file's
// directory. The result is canonical.
func readGitPointer(file string) (string, bool) {
	sp, ok := gitPointerSpelling(file)
	if !ok {
		return "", false
	}
	return canon.Canonical(sp), true
}

// gitPointerSpelling is readGitPointer before canonicalization: the absolute
// spelling git will resolve.
func gitPointerSpelling(file string) (string, bool) {
	b, ok := readSmall(file)
	if !ok {
		return "", false
	}
	rest, found := bytes.CutPrefix(b, []byte("gitdir: "))
	p := strings.TrimRight(string(rest), " \t\r\n")
	if !found || p == "" {
		return "", false
	}
	return spellFrom(path.Dir(file), p), true
}

// readCommonDir reads <d>/commondir the way git does: trailing CR and LF dropped, a
// relative path taken relative to d. The result is canonical.
func readCommonDir(d string) (string, bool) {
	sp, ok := commonDirSpelling(d)
	if !ok {
		return "", false
	}
	return canon.Canonical(sp), true
}

// commonDirSpelling is readCommonDir before canonicalization.
func commonDirSpelling(d string) (string, bool) {
	b, ok := readSmall(d + "/commondir")
	if !ok {
		return "", false
	}
	p := strings.TrimRight(string(b), "\r\n")
	if p == "" {
		return "", false
	}
	return spellFrom(d, p), true
}

// readBackPointer reads <g>/gitdir, which git writes into a linked worktree's
// directory: the path of the worktree's .git file (relative to g since git 2.48 with
// worktree.useRelativePaths).
func readBackPointer(g string) (string, bool) {
	b, ok := readSmall(g + "/gitdir")
	if !ok {
		return "", false
	}
	p := strings.TrimRight(string(b), " \t\r\n")
	if p == "" {
		return "", false
	}
	return resolveFrom(g, p), true
}

// resolveFrom is the canonical spelling of p taken relative to dir. dir is canonical;
// joining by string and canonicalizing keeps ".." physical, as git's realpath does.
func resolveFrom(dir, p string) string {
	return canon.Canonical(spellFrom(dir, p))
}

// spellFrom is p taken relative to dir, joined by string and not cleaned, so that
// ".." stays physical when the result is resolved.
func spellFrom(dir, p string) string {
	if !path.IsAbs(p) {
		p = dir + "/" + p
	}
	return p
}

// maxLinksOn bounds the links [linksOn] follows for one spelling, like the kernel's
// MAXSYMLINKS for one lookup.
const maxLinksOn = 40

// linksOn returns the symbolic links that resolving the absolute spelling p passes
// through, in the order the kernel meets them, each named by its own path (its
// parent canonical, its last component the link's name), as canon.EachLink meets
// them (looked up on the host, never inside a mount this process serves): the names
// a command would retarget to make p lead elsewhere. It stops where the rest of p
// does not exist or follows a non-directory, and after maxLinksOn links.
func linksOn(p string) []string {
	if !path.IsAbs(p) {
		return nil
	}
	var links []string
	canon.EachLink(p, func(link string, _ *unix.Stat_t) error {
		if len(links) >= maxLinksOn {
			return errEnoughLinks
		}
		links = append(links, link)
		return nil
	})
	return links
}

// errEnoughLinks ends linksOn's walk at maxLinksOn links.
var errEnoughLinks = errors.New("policy: enough links")

// submodulePaths returns the submodule paths the .gitmodules file of the checkout w
// lists (submodule.*.path), as git accepts them: relative, with no "." or ".."
// component.
func submodulePaths(w string) []string {
	b, ok := readSmallMax(w+"/.gitmodules", maxConfigBytes)
	if !ok {
		return nil
	}
	values, _ := configScan(string(b), "submodule", "path", true)
	var out []string
	for _, v := range values {
		v = strings.TrimSuffix(v, "/")
		if v == "" || path.IsAbs(v) || slices.ContainsFunc(strings.Split(v, "/"), func(c string) bool { return c == "" || c == "." || c == ".." }) {
			continue
		}
		out = append(out, v)
	}
	return out
}

// configIncludes returns the files the git configuration file names with
// include.path and includeIf.<condition>.path, spelled as git resolves them: "~/"
// from home, a relative path from the file's directory. Conditions are not
// evaluated (any may hold later), and the included files' own includes are not
// followed (configIncludesDeep does). The file is read at read, which is file
// itself or, for an included file, what it leads to: git follows a link there,
// and resolves relative paths from the link's own directory.
func configIncludes(read, file, home string) []string {
	b, ok := readSmallMax(read, maxConfigBytes)
	if !ok {
		return nil
	}
	plain, _ := configScan(string(b), "include", "path", false)
	conditional, _ := configScan(string(b), "includeif", "path", true)
	var out []string
	for _, v := range slices.Concat(plain, conditional) {
		switch {
		case v == "":
			continue
		case strings.HasPrefix(v, "~/"):
			if home == "" {
				continue
			}
			v = home + v[1:]
		case !path.IsAbs(v):
			v = path.Dir(file) + "/" + v
		}
		out = append(out, v)
	}
	return out
}

// maxIncludeDepth is how deep includes are followed, as git's MAX_INCLUDE_DEPTH;
// maxIncludes bounds how many included files are listed in all.
const (
	maxIncludeDepth = 10
	maxIncludes     = 256
)

// configIncludesDeep returns the files the configuration file includes, directly
// and through included files that exist, each once, in the order met: an
// included file's own includes are resolved against its directory, as git does,
// and an included file that is a symlink is read where it leads (found by review:
// a dotfile manager's ~/.gitconfig.shared -> dots/shared.cfg hid what that file
// includes). Not followed: an included file over maxConfigBytes, and anything
// past maxIncludes files.
func configIncludesDeep(file, home string) []string {
	var out []string
	seen := map[string]bool{}
	level := []string{file}
	for depth := 0; depth < maxIncludeDepth && len(level) > 0; depth++ {
		var next []string
		for _, f := range level {
			read := f
			if depth > 0 {
				read = canon.Canonical(f)
			}
			for _, inc := range configIncludes(read, f, home) {
				if seen[inc] || len(out) >= maxIncludes {
					continue
				}
				seen[inc] = true
				out = append(out, inc)
				next = append(next, inc)
			}
		}
		level = next
	}
	return out
}

// configValue returns the last value of section.key (no subsection) in the git
// configuration file, read as git's config parser reads it: section and key names
// case-insensitive, a key on the header's line, values with double quotes,
// backslash escapes, line continuations and comments, whitespace outside quotes
// trimmed at the ends and each inner run kept as spaces. Include directives are not
// followed. A file that is not a regular file of at most maxConfigBytes, or that
// does not parse, has no values.
func configValue(file, section, key string) (string, bool) {
	b, ok := readSmallMax(file, maxConfigBytes)
	if !ok {
		return "", false
	}
	v, found, parsed := configLookup(string(b), section, key)
	return v, found && parsed
}

// ValidHead reports whether b, the start of a HEAD file, passes the content rule of
// git's validate_headref: "ref:", optional white space, "refs/..."; or an object
// name of hexsz hex digits at the start (git's get_oid_hex: what follows does not
// matter). git reads at most 255 bytes of it. White space is git's own isspace:
// space, tab, LF and CR, not VT or FF (a "ref:\vrefs/..." HEAD is no git
// directory to git; taking it for valid let the repair after a bwrap run pass over
// a broken submodule git directory: review F5, 2026-12-02). A symbolic link HEAD
// (valid to git when its text starts with "refs/") is the caller's to judge.
func ValidHead(b []byte, hexsz int) bool {
	if rest, ok := bytes.CutPrefix(b, []byte("ref:")); ok {
		return bytes.HasPrefix(bytes.TrimLeft(rest, " \t\n\r"), []byte("refs/"))
	}
	if len(b) < hexsz {
		return false
	}
	for _, c := range b[:hexsz] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// GitObjectNameHex is the length in hex of an object name in the git directory
// gitDir: 64 where its config sets extensions.objectFormat to sha256, else 40
// (SHA-1; also for a config that cannot be read, under which a SHA-256 name passes
// as well, since git reads only as many digits as it needs).
func GitObjectNameHex(gitDir string) int {
	if v, ok := configValue(gitDir+"/config", "extensions", "objectformat"); ok && v == "sha256" {
		return 64
	}
	return 40
}

// configLookup is configValue on the file's text; parsed is false when it does not
// parse.
func configLookup(s, section, key string) (value string, found, parsed bool) {
	values, parsed := configScan(s, section, key, false)
	if !parsed || len(values) == 0 {
		return "", false, parsed
	}
	return values[len(values)-1], true, true
}

// configScan returns every value of key in s, in order: in the plain [section] when
// sub is false, in every [section "subsection"] (or [section.subsection]) when it is
// true. parsed is false when s does not parse.
func configScan(s, section, key string, sub bool) (values []string, parsed bool) {
	in := false // the current section is the one asked for
	i := 0
	if strings.HasPrefix(s, "\xef\xbb\xbf") {
		i = 3 // a UTF-8 byte order mark, which git skips too (found by review)
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
		case c == '#' || c == ';':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '[':
			// [name], [name "subsection"] (quotes and backslashes escaped inside),
			// or the old [name.subsection]; only a plain [name] is the section.
			i++
			start := i
			for i < len(s) && s[i] != ']' && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' {
				i++
			}
			name := s[start:i]
			hasSub := false
			for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
				i++
			}
			if i < len(s) && s[i] == '"' {
				hasSub = true
				for i++; i < len(s) && s[i] != '"'; i++ {
					if s[i] == '\n' {
						return nil, false
					}
					if s[i] == '\\' {
						i++
					}
				}
				i++ // the closing quote
			}
			if i >= len(s) || s[i] != ']' {
				return nil, false
			}
			i++
			base, _, dotted := strings.Cut(name, ".")
			hasSub = hasSub || dotted
			in = strings.EqualFold(base, section) && hasSub == sub
		case isAlpha(c):
			start := i
			for i < len(s) && (isAlpha(s[i]) || (s[i] >= '0' && s[i] <= '9') || s[i] == '-') {
				i++
			}
			name := strings.ToLower(s[start:i])
			for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
				i++
			}
			var v string
			if i < len(s) && s[i] == '=' {
				var ok bool
				if v, i, ok = configParseValue(s, i+1); !ok {
					return nil, false
				}
			} else if i < len(s) && s[i] != '\n' && s[i] != '\r' && s[i] != '#' && s[i] != ';' {
				return nil, false
			}
			if in && name == strings.ToLower(key) {
				values = append(values, v)
			}
		default:
			return nil, false
		}
	}
	return values, true
}

// configParseValue parses a value starting at s[i] (after the "="), up to the end of
// its line, and returns it with the index after it.
func configParseValue(s string, i int) (string, int, bool) {
	var b strings.Builder
	quoted := false
	spaces := 0
	for ; i < len(s); i++ {
		c := s[i]
		if c == '\n' {
			if quoted {
				return "", i, false
			}
			break
		}
		if !quoted && (c == ';' || c == '#') {
			for i < len(s) && s[i] != '\n' {
				i++
			}
			break
		}
		if !quoted && (c == ' ' || c == '\t' || c == '\r') {
			if b.Len() > 0 {
				spaces++
			}
			continue
		}
		for ; spaces > 0; spaces-- {
			b.WriteByte(' ')
		}
		switch c {
		case '"':
			quoted = !quoted
		case '\\':
			i++
			if i >= len(s) {
				return "", i, false
			}
			switch s[i] {
			case '\n':
				// continuation: the value goes on on the next line
			case '\r':
				if i+1 < len(s) && s[i+1] == '\n' {
					i++
				}
			case 't':
				b.WriteByte('\t')
			case 'b':
				s := b.String()
				if len(s) > 0 {
					b.Reset()
					b.WriteString(s[:len(s)-1])
				}
			case 'n':
				b.WriteByte('\n')
			case '\\', '"':
				b.WriteByte(s[i])
			default:
				return "", i, false
			}
		default:
			b.WriteByte(c)
		}
	}
	if quoted {
		return "", i, false
	}
	return b.String(), i, true
}

func isAlpha(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// readSmall reads a regular file (never through a final symlink) of at most
// maxGitFileBytes. The open neither follows a link nor waits: a FIFO swapped in for
// the name after a check would otherwise block the reader until someone writes to
// it, and the fence resolves its protected paths under a lock that every mutation
// of the mount waits for (found by review: a racer on the host wedged a mount this
// way). What was opened is checked, not what the name was before.
func readSmall(file string) ([]byte, bool) { return readSmallMax(file, maxGitFileBytes) }

// readSmallMax is readSmall with a limit of max bytes.
func readSmallMax(file string, max int64) ([]byte, bool) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > max {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil || int64(len(b)) > max {
		return nil, false
	}
	return b, true
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func isRegular(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}

// verifiedWorktree returns the common git directory of the linked worktree whose top
// level is the root r, when the structure proves that git itself registered r as
// that worktree (see the package doc, "Linked worktrees"):
//
//  1. r/.git is a regular file "gitdir: <G>";
//  2. G is a directory that lies outside every root in writable: the evidence below
//     must not be something a confined command could have written;
//  3. G/gitdir names r/.git, G/HEAD is a file, and G/commondir names a directory C;
//  4. C looks like a git directory (HEAD, objects/, refs/);
//  5. G is C/worktrees/<name>: the common directory lists G as one of its worktrees.
//
// Every path is compared in its canonical spelling.
func verifiedWorktree(r string, writable []string) (string, bool) {
	dotgit := path.Join(r, ".git")
	if !isRegular(dotgit) {
		return "", false
	}
	g, ok := readGitPointer(dotgit)
	if !ok || !isDir(g) {
		return "", false
	}
	for _, w := range writable {
		if canon.LexicallyWithin(g, w) {
			return "", false
		}
	}
	back, ok := readBackPointer(g)
	if !ok || back != canon.Canonical(dotgit) || !isRegular(g+"/HEAD") {
		return "", false
	}
	c, ok := readCommonDir(g)
	if !ok || !isRegular(c+"/HEAD") || !isDir(c+"/objects") || !isDir(c+"/refs") {
		return "", false
	}
	if path.Dir(g) != c+"/worktrees" {
		return "", false
	}
	return c, true
}
