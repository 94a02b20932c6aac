// Package policy owns toh's policy file: its version-1 data model, the strict parser,
// validation, the atomic writer, resolution of one call's execution policy, and the
// escalation ladder.
//
// toh-exec and toh-mount both read the file through this package, and both confine
// with the [Execution] value that [Resolve] returns, so the shell family and the file
// family can never confine to different roots or modes. There is no hidden "current
// policy": every confinement call takes an Execution argument. This package is pure
// data plus file I/O; it imports only canon and never reads flags or the environment.
//
//	f, found, err := policy.Load(path) // missing file: Default(), found == false
//	if err != nil {
//		return err // malformed: refuse to run, never fall back
//	}
//	x, err := policy.Resolve(f, policy.Request{SessionID: id, Cwd: wd, TmpDir: tmp, PolicyFile: path})
//
// # Parsing
//
// [Parse] is stricter than encoding/json, on purpose. encoding/json silently lets the
// last of two duplicate keys win, matches keys case-insensitively ("Mode" sets mode
// even with DisallowUnknownFields), accepts null for any field, and replaces invalid
// UTF-8 with U+FFFD. Each of those lets a file say something other than what a
// reviewer reads, so Parse first walks the token stream and rejects duplicate keys,
// keys not spelled exactly as in the struct tags, null anywhere, non-UTF-8 input,
// nesting beyond 16 levels, and anything after the document. Only then does
// encoding/json decode it, level by level (file, session, event) with
// DisallowUnknownFields, so every error can name the field as a path in the document's
// own notation: `policy: sessions["s-42"].events[1].mode: unknown mode "rw" (want
// read-only, workspace-write or danger-full-access)`. Byte positions in syntax errors
// are 0-based offsets.
//
// version is read first and leniently: a document whose version is an integer other
// than 1 fails with "unsupported version N" before anything else is looked at, since a
// newer file is expected to hold keys this parser does not know.
//
// Empty arrays and objects ("writableRoots": [], "sessions": {}, "events": []) parse to
// nil: they mean the same as an absent key, and normalizing them keeps Parse and
// [File.Marshal] inverse to each other. "protect": [] is the exception: an empty list
// means "protect nothing", while an absent key means [DefaultProtect], so it stays a
// non-nil pointer.
//
// [File.Validate] holds every non-syntax rule, so a File built in code is checked
// exactly like a parsed one (Resolve and Update call it): version 1; modes, network
// and approval from their closed vocabularies ("" only where the key is optional; an
// event without a mode is an error); workspaceRoot, writableRoots and every session
// cwd absolute and free of NUL bytes (a session cwd is required); session IDs
// non-empty ("" means "no session" in a [Request], so such a session could never be
// selected); protect entries non-empty, relative, clean, without "..", and not "."
// (which would silently make whole roots read-only).
//
// # Writing
//
// [Update] is the only writer; [AddSession], [AppendEvent] and [SetMode] are built on
// it. Sessions are append-only: an update that removes a session, changes its cwd, or
// removes or rewrites an event already logged fails with [ErrAppendOnly]. A session's
// approval and the deployment keys stay editable. [AddSession] stores the cwd
// canonical, resolved once at creation: if it stored a spelling through a symlink, a
// command allowed to retarget that symlink (say, one inside the workspace) could move
// the root of every later call of the session. Update refuses to replace a symlink or
// any non-regular file at path, and refuses to rewrite a malformed file (a human must
// look at it).
//
// # Resolution
//
// [Resolve] follows SPEC §2 in order; its doc lists every default. Two decisions go
// beyond the SPEC: ExtraRoots, like WritableRoots, is empty unless the mode is
// workspace-write, so no backend can bind an extra root writable under read-only by
// mistake; and an escalation that is not strictly wider than the mode the call would
// otherwise get is refused with the NOT_WIDER text instead of silently narrowing.
//
// # Protected paths
//
// [Execution.ProtectedPaths] turns the protect list, the policy file and its lock into
// canonical absolute paths, each with whether it exists and what kind it is (or what
// may stand in for it while missing), so bwrap, Seatbelt and the fence protect the
// same paths. Entries under ".git/" are read relative to every git directory that
// belongs to a writable root, not to the root: a linked worktree's or a submodule's
// hooks and config live in git directories elsewhere, and "<root>/.git/hooks" would
// miss them. A protected spelling that passes through symbolic links (".git" or
// ".git/hooks" a link, an entry that is one) protects each link's own name too, in a
// record of Kind [PathLink]: otherwise a command could retarget ".git" at a
// repository of its own and leave everything protected untouched.
//
// The git rule: ".git/..." entries apply to git directories that exist when the run
// starts. "git init" must create .git/config and .git/hooks, so a repository created
// by the run is the run's own, hooks and configuration included. The trade-off: a
// user who later runs git in a repository an agent created runs whatever the agent
// put in its configuration, as with any other file the agent wrote (a Makefile, a
// package.json script). The same holds for a worktree directory created by the
// run ("git worktree add"); a submodule git directory cannot be created in a run
// (see below). One
// exception: a root without a repository of its own that lies inside someone else's
// ("repo/sub") gets "<root>/.git" itself protected, so that no repository of the
// command's shadows the enclosing one for git commands run in the root.
//
// Protection keeps a path from being changed, not its ancestors from being opened to
// others: a command may "chmod 0777 .git", after which any local user could replace
// .git/hooks on the host once the run ended. The fence denies such widening above a
// protected path; bwrap cannot tell paths apart there, so toh-exec takes the widened
// access back after a bwrap run (sandbox/access_linux.go); under Landlock
// workspace-write protected paths are not kept at all (partial).
//
// Beyond the entries themselves, these files decide where git looks for a git
// directory's hooks and configuration and are protected with them (reason "git"):
// the root's .git pointer file; the .git pointer of every submodule checkout (found
// through core.worktree of the submodule's git directory) and of every linked
// worktree (through the worktree directory's gitdir back-pointer), when its checkout
// directory exists: rewritten, it would send git into a git directory of the
// command's own the next time the user's git enters the checkout, and "git status"
// in the superproject enters every populated submodule (found by review; so a run
// cannot remove or move such a checkout either); every git directory's commondir (git reads config and
// hooks from the directory it names: creating ".git/commondir" in an ordinary
// repository redirects both, which this project verified with git 2.39), and
// config.worktree beside a protected config, and the files a protected config
// includes, those files' own includes, and the links on the way to each (found by
// review, 2026-12-02). A missing commondir is PathCommondir: an
// empty stand-in would make git die, so its stand-in holds ".", which git reads as
// the git directory itself, what no commondir means (before 2026-12-02 it got none,
// and under bwrap a command could create it: TestCommondirCannotBeCreated). A
// missing config.worktree gets an empty file stand-in, which git reads as no
// settings.
//
// Every git directory's modules/ may gain no entry (a missing one included), while
// the submodule git directories in use in it (a checkout's .git leads there) stay
// writable, all but their own protected paths (ProtectedPath.Except); a stale one
// stays read-only. git takes an existing modules/<name> as
// the git directory of a submodule it initialises, hooks and configuration
// included, so a command that made one for a submodule not yet initialised had the
// user's next "git submodule update --init" run a hook of its own, unconfined
// (review F4, 2026-12-02; TestUninitialisedSubmoduleCannotBePlanted). Which names
// git will use is the command's to change (.gitmodules and the index are
// writable), so the whole directory is kept, not the names .gitmodules lists. The
// cost: "git submodule add" (and absorbgitdirs) fails in a run in an existing
// repository; the user adds submodules.
//
// Found by review of that change: within a submodule git directory E, writable, a
// command can make a git directory E/x of its own, and git refuses a submodule git
// directory nested in another only while the outer one is a valid git directory,
// which E stops being when the command moves its HEAD away. A .gitmodules that
// names a submodule "<E's name>/x" then had the user's next "git submodule update
// --init" use E/x, hooks included. The name is the command's to choose (in the
// working tree's .gitmodules, in one it creates where there was none, in the index
// or in a commit), and keeping .gitmodules read-only (4291e8c) closed only the first
// while breaking checkout, merge, rebase and reset between commits whose .gitmodules
// differ, so it was reverted. What holds instead: only the submodule git
// directories in use are writable (a stale one stays read-only), and after a bwrap
// run toh-exec puts back what the command left invalid in them
// (sandbox/heads_linux.go). Fenced runs and the standing fence have no run end:
// there the HEAD, objects/ and refs/ of each are protected paths of their own
// (ProtectValid), which the fence keeps valid as the command goes, letting a rename
// bring only a HEAD git takes for valid (fusefence's renameHead). Before
// 2026-12-02 F5 stayed open there. Seatbelt has neither, so it stays open on macOS.
//
// Not found yet, and so not protected: a submodule whose git directory lies inside
// its checkout when no .gitmodules lists it (git finds gitlinks in the index, which
// is not read here). In a "repo/sub" workspace the enclosing repository's structure
// that lies inside it (its submodules' checkouts there) is protected like a root's.
//
// What protection does not cover, and cannot without breaking git in workspace-write:
// the index and the working tree stay writable, so a command can stage a nested
// repository as a gitlink; "git status" in the superproject then runs git in it,
// which reads the nested repository's own configuration (core.fsmonitor runs a
// program; also verified with git 2.39). Protected paths keep an existing repository's
// own hooks and configuration from being planted; they do not make running git on a
// tree an agent wrote safe. Neither do they cover core.hooksPath pointing into the
// working tree (husky's ".husky"): add that directory to protect.
//
// # Linked worktrees
//
// A commit in a linked worktree writes to its git directory (<common>/worktrees/<name>)
// and to the common directory (objects, refs), both usually outside the workspace.
// [Execution.WithWorktreeRoots] adds the common directory as a writable root instead
// of asking the user to. It is a separate step after [Resolve] (its doc says why);
// toh-exec applies it, so "toh-exec policy show" prints the added roots under
// worktreeRoots.
//
// Threat model: a .git file in a writable root is content a confined command can
// write. A command could plant "gitdir: /home/alice/.ssh" for the next run to make
// that directory writable. A pointer is therefore honoured only when the structure it
// leads to proves that git registered this root as a worktree of that repository, and
// the proof lies where no confined command of this policy could have written it:
//
//  1. <root>/.git is a regular file (not a symlink) "gitdir: <G>";
//  2. G lies outside every writable root;
//  3. G/gitdir (git's back-pointer) names <root>/.git, and G/HEAD is a file;
//  4. G/commondir names a directory C with HEAD, objects/ and refs/;
//  5. G is C/worktrees/<name>.
//
// Forging that needs write access to C/worktrees, which a command has only if C is
// already writable. Submodule checkouts and --separate-git-dir repositories have no
// back-pointer, so their git directories are never added: name them in writableRoots.
// The added directory's hooks, config, commondir and per-worktree directories stay
// read-only (it is a git directory of the worktree's root, see ProtectedPaths).
//
// # Decisions
//
// [Execution.Decide] answers whether one mutation (an [Op]: write, create, delete or
// rename) at a path is allowed, and by which rule, from the same writable roots and
// protected paths the backends enforce; "toh-exec why" prints its answer. The target
// is resolved as the fence re-resolves a mutation (the name itself for create,
// delete and rename; what the path leads to for write), and the rule names are the
// fence's where both name the same reason. It answers for the policy: where a
// backend enforces less (Landlock no protected path, bwrap no missing path of Kind
// [PathAbsent]) that backend's doc says so. A property test in cmd/toh-exec checks
// it against real bwrap runs and a real fence mount on random trees and policies.
//
// # Escalation
//
// [ValidateEscalation] returns an [*EscalationError] whose Error() is the exact SPEC
// §6 text and whose Code() is for branching. A justification is empty unless it holds
// at least one Unicode letter or number; white space, punctuation, control and
// zero-width characters alone do not make a sentence.
//
// # Exact texts
//
// Texts that harnesses key on ([DenialMarker], [EscalationHint], [DeniedText], the
// escalation texts) are copied byte for byte from the SPEC, and a test finds each in
// SPEC.md. Modes and paths are interpolated verbatim between plain double quotes: a
// path containing `"` is printed as is, not escaped.
//
// # Threat model
//
// The file is durable state that decides what agents may change. A malformed file fails
// loud (every reader returns an error naming the field), never open. Writers replace the
// file atomically (temp file beside it, fsync, rename, fsync of the directory) under an
// exclusive flock(2) on the sibling lock file path+".lock", which is created 0600 and
// never deleted (deleting it would let two writers lock two different inodes), so
// concurrent writers never lose an event and readers, which take no lock, never see a
// torn file. Confined commands must never be able to write the file or its directory;
// the sandbox backends receive its path in [Execution.PolicyFile] for that reason.
// Anyone who can write the directory can write any policy; nothing here defends
// against that.
//
// # Platform support
//
// Everything is portable except the writer's lock: flock(2) on Linux, macOS and the
// BSDs. Elsewhere the writers fail with [ErrLockUnsupported] rather than write without
// mutual exclusion; reading and resolving work everywhere.
//
// # Limitations
//
//   - Resolve canonicalizes at call time: a workspaceRoot or writableRoots entry spelled
//     through a symlink follows that symlink's current target. Where a confined
//     command could retarget that symlink (its own name lies within a writable root:
//     writableRoots ["/ws/link"] with /ws the workspace), the next call would get
//     another root, "/" for a link retargeted to "/". Resolve refuses such a spelling
//     with a [*MovableRootError] naming the entry, the link and the directory to write
//     instead, for the session cwd, workspaceRoot, each writableRoots entry and
//     $TMPDIR alike; never by silently following the link. A directory on the way
//     that a command replaces by a link (possible where no mountpoint pins it, under
//     Landlock) is refused at the next call the same way.
//   - A replaced file is owned by whoever wrote it; only the permission bits are kept.
//   - Sessions cannot be deleted and logs grow forever; readers refuse files over 64 MiB
//     (about a million events) with an error rather than run out of memory.
//   - A lock holder that hangs blocks every writer (not reader); flock is released when
//     the holder's process dies.
package policy

// Mode is one of the three sandbox modes. The vocabulary is closed: [ParseMode] rejects
// anything else, including the empty string.
type Mode string

const (
	ReadOnly         Mode = "read-only"
	WorkspaceWrite   Mode = "workspace-write"
	DangerFullAccess Mode = "danger-full-access"
)

// Network is the network switch of SPEC §7.
type Network string

const (
	NetworkAllow Network = "allow"
	NetworkDeny  Network = "deny"
)

// Approval says whether escalation requests may prompt ("ask") or are rejected
// deterministically ("never", for delegated children).
type Approval string

const (
	ApprovalAsk   Approval = "ask"
	ApprovalNever Approval = "never"
)

// File is the version-1 policy document exactly as stored. Zero values of optional
// fields mean "absent"; [Resolve] applies the defaults.
type File struct {
	Version       int       `json:"version"`
	Mode          Mode      `json:"mode,omitempty"`
	WorkspaceRoot string    `json:"workspaceRoot,omitempty"`
	WritableRoots []string  `json:"writableRoots,omitempty"`
	Protect       *[]string `json:"protect,omitempty"`
	Network       Network   `json:"network,omitempty"`
	Approval      Approval  `json:"approval,omitempty"`
	// Fence asks toh-exec to serve each run's writable roots through the fence (see
	// toh-exec --fence); nil means false.
	Fence    *bool              `json:"fence,omitempty"`
	Sessions map[string]Session `json:"sessions,omitempty"`
}

// Session is one agent session: an immutable working directory and a durable mode log.
type Session struct {
	Cwd      string   `json:"cwd"`
	Events   []Event  `json:"events,omitempty"`
	Approval Approval `json:"approval,omitempty"`
}

// Event is one entry of a session's mode log. The last event's mode is the session's
// effective mode.
type Event struct {
	Mode   Mode   `json:"mode"`
	Source string `json:"source,omitempty"`
}

// DefaultProtect is the protect list used when the file has no "protect" key.
var DefaultProtect = []string{".git/hooks", ".git/config"}

// Execution is the resolved policy of one call. It is the only input of every
// confinement mechanism in toh.
type Execution struct {
	Mode Mode `json:"mode"`
	// WorkspaceRoot is canonical.
	WorkspaceRoot string `json:"workspaceRoot"`
	// WritableRoots is canonical and deduplicated, first occurrence kept: the workspace
	// root, each extra root, /tmp and $TMPDIR, in that order. Empty unless the mode is
	// workspace-write.
	WritableRoots []string `json:"writableRoots"`
	// ExtraRoots are the canonical writableRoots entries of the file alone (the roots
	// beyond the workspace root and the temp areas); backends that treat /tmp specially
	// need to tell them apart.
	ExtraRoots []string `json:"extraRoots"`
	// WorktreeRoots are the verified common git directories of linked worktrees that
	// [Execution.WithWorktreeRoots] appended to WritableRoots; [Resolve] leaves it
	// empty.
	WorktreeRoots []string `json:"worktreeRoots,omitempty"`
	// TmpDir is the canonical $TMPDIR of the caller, or "" when unset or relative.
	TmpDir string `json:"tmpDir,omitempty"`
	// Protect lists paths relative to each writable root that stay read-only; entries
	// under ".git/" are relative to the root's git directories instead. Backends use
	// [Execution.ProtectedPaths], never these strings joined to a root.
	Protect  []string `json:"protect"`
	Network  Network  `json:"network"`
	Approval Approval `json:"approval"`
	// SessionID is "" for calls without a session.
	SessionID string `json:"sessionID,omitempty"`
	// PolicyFile is the canonical path of the policy file this execution came from,
	// whether or not it exists (a missing file means the embedded default), or "" when
	// the caller named none. Confined commands must never be able to write it, nor
	// create it where it is missing.
	PolicyFile string `json:"policyFile,omitempty"`
	// Escalated is true when Mode came from an approved one-shot escalation.
	Escalated bool `json:"escalated,omitempty"`
	// Fence is the file's "fence" key: serve the run's writable roots through the
	// fence so that its denials are recorded exactly (toh-exec --fence).
	Fence bool `json:"fence,omitempty"`
}

// Request carries what the caller knows about one call; the caller (cmd) gathers it
// from flags and its own process state, never this package.
type Request struct {
	// SessionID selects sessions.<id>; "" means no session. An ID that the file does not
	// hold is an error.
	SessionID string
	// Escalation is the approved wider mode for this one call, or "".
	Escalation Mode
	// DeploymentMode, when set, replaces the file's "mode" key (step 3 of resolution):
	// the operator's --mode flag. A session's own mode log still wins over it.
	DeploymentMode Mode
	// Cwd is the caller's working directory (absolute).
	Cwd string
	// TmpDir is the caller's $TMPDIR, or "".
	TmpDir string
	// PolicyFile is the path the file was read from, or would have been read from
	// had it existed; "" for none.
	PolicyFile string
}
