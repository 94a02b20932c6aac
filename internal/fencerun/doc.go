// Package fencerun serves one toh-exec run's writable roots through the fence
// (toh-exec --fence, or "fence": true in the policy file), so that every mutation the
// policy refuses there is recorded exactly and attached to that run's result
// (SPEC §5.1).
//
// # How a fenced run is built
//
// The fence is served by toh-mount, installed beside toh-exec: toh-exec starts
// "toh-mount __fence-run" (package fencehost) in place of the runner argv and reads
// its report from a pipe, so toh-exec itself never links go-fuse and a run without
// --fence costs exactly what it did. The host starts a stage of its own binary
// ("toh-mount __fence-stage") in a new mount
// namespace (and, for a user other than root, a new user namespace that maps only
// that user). The stage makes every mount private, so nothing it mounts is seen by
// the host or propagates back, and then, for each fenced root, outermost first:
// opens /dev/fuse, mounts a FUSE file system on the root with that descriptor, and
// passes the descriptor to the host over a socket. The host serves each descriptor
// with a fusefence fence whose source is the root itself: the host stays in the
// machine's mount namespace, where the root is the real directory, so the fence
// never loops through its own mount. Once every fence answers, the stage changes to the
// working directory again (through the fence: the directory it inherited is the one
// underneath) and execs the runner argv (bwrap, or the Landlock launcher). The runner
// confines the command as usual and sees the fenced roots where the roots are. The
// runner's status pipe (sandbox/status.go), descriptor 3 of the process toh-exec
// starts, goes through the host and the stage at that number and to nothing else
// either starts: every descriptor below the host's result descriptor is the runner's,
// and the host closes its copies once the stage holds them.
//
// The fence judges every mutation in the fenced roots by the same compiled policy
// the runner got (passed to the host as JSON), denies with EACCES, and records each
// denial in the FUSE request itself, before the caller sees the error; the host
// forwards signals to the stage, passes its exit status (or its death by signal)
// through, and writes the records as its last line. The records are therefore
// complete for the run (up to [MaxDenials]; the rest are counted) and belong to it
// alone: the mounts exist only in the run's namespace, and only its processes can
// reach them (for a caller other than root, whose fences exist on the host for a
// moment, each fence also acts only for processes in the stage's user namespace or
// beneath it: see fencehost's admit_linux.go). PIDs are as the host sees them.
//
// # Decisions
//
//   - Which roots: every writable root but "/tmp". Under bwrap /tmp is a private
//     tmpfs (nothing to fence); under Landlock it is the host's, where other
//     programs keep Unix sockets and FIFOs that a FUSE mirror cannot carry (see
//     Limitations); the price is that a protected path under /tmp stays as
//     unprotected as Landlock alone leaves it (a partial run either way).
//     read-only has no writable roots, so nothing is fenced and the result says so
//     (fence.roots is empty, denied comes from the dialect alone).
//   - What the fence lets through: its policy's writable roots are those the
//     command can write on the host by itself (sandbox.Confined.FenceWritable),
//     not the policy's own list. The fence resolves a link in a fenced root on the
//     host, where /tmp is the host's: judged by the policy's list, which names
//     /tmp, a link to it let a bwrap run (whose /tmp is a private tmpfs) write the
//     host's /tmp, and replace a toh-exec installed there that the next call ran
//     unconfined (found by review). Under bwrap that is every root but /tmp; under
//     Landlock all of them, /tmp included (the command writes the host's /tmp
//     directly there anyway).
//   - Protected paths inside fenced roots are left to the fence (bwrap rebinds them
//     read-only otherwise, and its EROFS would never reach the fence), the policy
//     file and its lock included: the fence guards them as its own, so an attempt on
//     them is on record. The probe cache keeps bwrap's read-only rebind (it is not
//     trusted inside a writable root anyway), and the fences guard it too (rule
//     protected): a link in one fenced root to its directory in another was once
//     followed by the fence on the host and rewrote it (found by review).
//   - The host dies with toh-exec (parent-death signal): a toh-exec killed during the
//     setup never leaves a host that starts the command on its own.
//   - Root's mounts carry default_permissions: the kernel checks the caller's own
//     permission bits and capabilities before the fence acts, so a command that
//     dropped its capabilities cannot borrow the daemon's. A caller other than root
//     mounts through fusermount3 without it: the daemon then has exactly the
//     command's own IDs and no capability, so the host's checks of the daemon's
//     operations are the command's.
//   - The command runs with the caller's umask. Serving a fence sets the host's
//     umask to 0 (the kernel has already applied the caller's to every mode it
//     sends), and a caller other than root serves before the stage starts, so the
//     stage is given the umask the host started with and sets it before the exec
//     (once, every file such a command made was world-writable).
//   - The report is read while the run goes on. It can be larger than a pipe's
//     buffer (MaxDenials records of up to PATH_MAX bytes each): toh-exec once read
//     it only after the host exited, while the host blocked writing it, and a
//     command that provoked ~700 refusals hung the run for good.
//   - A denial after the records were collected is never answered. A process the
//     command left behind (Landlock has no PID namespace) can go on mutating while
//     the host ends; answering its refusals with EACCES would refuse something the
//     result does not record. Its request waits instead until the host exits and
//     the kernel fails it with ENOTCONN, as every later operation there. toh-exec
//     then kills such a process (sandbox.Stdio.EndLeftovers).
//   - Fail closed: if the stage cannot create its namespaces, open /dev/fuse, mount, or
//     a fence cannot start, the command does not run (SANDBOX_UNAVAILABLE with the
//     cause). A failure to exec the runner after the fences are up is a runner failure.
//   - Lifetime: the mounts live as long as the run's mount namespace. When the host
//     exits, its descriptors close and any leftover process of the run that still
//     reaches a fenced root gets ENOTCONN, never the unfenced directory.
//   - The host dies by the signal the stage's child died by, any signal: it sets
//     the signal's disposition back to the default with a raw rt_sigaction first,
//     since Go's runtime ignores a SIGPIPE sent by kill and turns SIGSEGV into a
//     crash report with status 2 (a fenced Landlock run once said exitCode 141 or 2
//     where the unfenced one said signal 13 or 11). No core file is written for it.
//   - Under Landlock a fenced root beneath an unfenced writable root (the host's
//     /tmp) is refused (sandbox.Run, SANDBOX_UNAVAILABLE): its parent is the
//     host's own directory, writable by the command, which could move it away and
//     put a look-alike with protected paths at the root's path, outside every
//     fence. Under bwrap /tmp is a private tmpfs and such a workspace runs.
//   - A caller other than root: the stage hides the user's fence directory (its
//     window lock and the copies of the host mounts the new namespace took) under
//     an empty, read-only, mode-0 tmpfs before the exec. A command that could open
//     the lock could leave a process holding it, and every later fenced run of the
//     user would wait for it until setup timed out; read access is enough for
//     flock, and under Landlock the command may chmod its own files, so only
//     hiding it keeps it out of reach. Another mount of the same file system
//     elsewhere would still show it.
//   - The policy is the run's, fixed at the start like the runner's; a policy change
//     during the run applies to the next run.
//
// # Limitations
//
//   - IPC endpoints inside a fenced root are not shared with processes outside the
//     run: connecting to a Unix socket there is refused, and a FIFO there is a
//     different pipe inside the run than outside (a writer waits for a reader that
//     never comes: the run hangs). FUSE mirrors files, not kernel objects. Keep
//     such endpoints out of fenced roots, or run without --fence.
//   - Each run gets a fresh mount with nothing cached: a command that stats a whole
//     tree (git status on 11,000 files) pays one FUSE round trip per file; see
//     bench/README.md for the figures.
//
// Only Linux has the fence; elsewhere [New] fails and a fenced run does not start;
// so does a run whose toh-mount is missing.
package fencerun

// MaxDenials bounds the records one run keeps; beyond it denials are only counted,
// so a command that provokes millions of denials cannot exhaust the host's memory.
const MaxDenials = 1000

// StageArg is the first argument that makes toh-mount run as the fence stage.
const StageArg = "__fence-stage"
