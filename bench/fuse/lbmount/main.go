//go:build linux

// Command lbmount mounts go-fuse's unfenced loopback file system (fs.NewLoopbackRoot)
// with the mount and cache options given on the command line. bench/fuse.sh runs it
// with exactly the options toh-mount uses, so the difference between the two is the
// cost of the fence itself; example/loopback has no flags for those options.
//
//	lbmount [flags] SOURCE MOUNTPOINT
//
// It runs in the foreground and unmounts on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/toh-sandbox/toh/fusefence/noopendir"
)

type config struct {
	passthrough    string // none, read (read-only opens), read+create (and write-only creates, as toh-mount), all
	keepCache      bool
	cacheDir       bool
	noFlush        bool
	directWrite    bool
	setattrTimeout time.Duration
}

// node is a loopback node whose opens follow config: go-fuse's own loopback uses
// passthrough for every open and no cache flags.
type node struct {
	fs.LoopbackNode
	cfg *config
}

// noPassthrough is a loopback file the kernel may not bypass.
type noPassthrough struct{ *fs.LoopbackFile }

func (noPassthrough) PassthroughFd() (int, bool) { return -1, false }

func (n *node) file(fh fs.FileHandle, flags uint32, created bool) (fs.FileHandle, uint32) {
	lf := fh.(*fs.LoopbackFile)
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
	if created && n.cfg.passthrough == "read+create" && flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		out := uint32(0)
		if n.cfg.noFlush {
			out |= fuse.FOPEN_NOFLUSH
		}
		return lf, out
	}
	var out uint32
	if n.cfg.keepCache && !write {
		out |= fuse.FOPEN_KEEP_CACHE
	}
	if n.cfg.noFlush {
		out |= fuse.FOPEN_NOFLUSH
	}
	if n.cfg.directWrite && flags&syscall.O_ACCMODE != syscall.O_RDWR && write {
		out |= fuse.FOPEN_DIRECT_IO
	}
	switch {
	case n.cfg.passthrough == "all", n.cfg.passthrough != "none" && !write:
		return lf, out
	}
	return noPassthrough{lf}, out
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, _, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	fh, out := n.file(fh, flags, false)
	return fh, out, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, _, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	fh, fl := n.file(fh, flags, true)
	return in, fh, fl, 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	errno := n.LoopbackNode.Setattr(ctx, fh, in, out)
	if errno == 0 && n.cfg.setattrTimeout > 0 {
		out.SetTimeout(n.cfg.setattrTimeout)
	}
	return errno
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno == 0 && n.cfg.cacheDir {
		fl |= fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	}
	return fh, fl, errno
}

func main() {
	timeout := flag.Duration("timeout", time.Second, "entry and attribute timeout")
	negative := flag.Duration("negative", 0, "negative entry timeout (0: none)")
	cfg := &config{}
	flag.StringVar(&cfg.passthrough, "passthrough", "all", "passthrough for: none, read (read-only opens), read+create (and write-only creates), all")
	flag.BoolVar(&cfg.keepCache, "keep-cache", false, "FOPEN_KEEP_CACHE on read-only opens")
	flag.BoolVar(&cfg.cacheDir, "cache-dir", false, "FOPEN_CACHE_DIR on directories")
	flag.BoolVar(&cfg.noFlush, "no-flush", false, "FOPEN_NOFLUSH on files")
	flag.BoolVar(&cfg.directWrite, "direct-write", false, "FOPEN_DIRECT_IO on write-only opens")
	flag.DurationVar(&cfg.setattrTimeout, "setattr-timeout", 0, "attribute timeout of SETATTR replies (0: none, as go-fuse)")
	killpriv := flag.Bool("killpriv-v2", false, "request CAP_HANDLE_KILLPRIV_V2, as toh-mount (the loopback then clears no set-ID bits: a benchmark only)")
	plusAuto := flag.Bool("readdirplus-auto", false, "request CAP_READDIRPLUS_AUTO")
	maxWrite := flag.Int("max-write", 0, "MaxWrite (0: go-fuse's default)")
	maxBackground := flag.Int("max-background", 0, "MaxBackground (0: go-fuse's default)")
	noPlus := flag.Bool("no-readdirplus", false, "disable READDIRPLUS")
	allowOther := flag.Bool("allow-other", false, "allow_other and default_permissions")
	atomicTrunc := flag.Bool("atomic-o-trunc", false, "request CAP_ATOMIC_O_TRUNC")
	noOpendir := flag.Bool("no-opendir", false, "no OPENDIR and RELEASEDIR (FUSE_NO_OPENDIR_SUPPORT, as toh-mount); the kernel then caches listings whatever -cache-dir says")
	debug := flag.Bool("debug", false, "log every request on stderr")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here until unmount")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: lbmount [flags] SOURCE MOUNTPOINT")
		os.Exit(2)
	}
	switch cfg.passthrough {
	case "none", "read", "read+create", "all":
	default:
		fmt.Fprintf(os.Stderr, "lbmount: -passthrough %q: want none, read, read+create or all\n", cfg.passthrough)
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lbmount:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	root := &fs.LoopbackRoot{Path: flag.Arg(0)}
	var st syscall.Stat_t
	if err := syscall.Stat(root.Path, &st); err != nil {
		fmt.Fprintln(os.Stderr, "lbmount:", err)
		os.Exit(1)
	}
	root.Dev = uint64(st.Dev)
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, cfg: cfg}
	}
	rootNode := root.NewNode(root, nil, "", &st)
	root.RootNode = rootNode

	opts := &fs.Options{
		EntryTimeout:    timeout,
		AttrTimeout:     timeout,
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			FsName:             root.Path,
			Name:               "lbmount",
			AllowOther:         *allowOther,
			DirectMount:        os.Geteuid() == 0,
			MaxWrite:           *maxWrite,
			MaxBackground:      *maxBackground,
			DisableReadDirPlus: *noPlus,
			Options:            []string{"nodev", "nosuid"},
			Debug:              *debug,
		},
	}
	if *negative > 0 {
		opts.NegativeTimeout = negative
	}
	if *allowOther {
		opts.MountOptions.Options = append(opts.MountOptions.Options, "default_permissions")
	}
	if cfg.passthrough == "none" {
		opts.MountOptions.DisabledCapabilities |= fuse.CAP_PASSTHROUGH
	}
	if *killpriv {
		opts.MountOptions.ExtraCapabilities |= fuse.CAP_HANDLE_KILLPRIV_V2
	}
	if *plusAuto {
		opts.MountOptions.ExtraCapabilities |= fuse.CAP_READDIRPLUS_AUTO
	}
	if *atomicTrunc {
		opts.MountOptions.ExtraCapabilities |= fuse.CAP_ATOMIC_O_TRUNC
	}
	var raw fuse.RawFileSystem = fs.NewNodeFS(rootNode, opts)
	if *noOpendir {
		opts.MountOptions.ExtraCapabilities |= fuse.CAP_NO_OPENDIR_SUPPORT
		raw = noopendir.Wrap(raw)
	}
	syscall.Umask(0)
	server, err := fuse.NewServer(raw, flag.Arg(1), &opts.MountOptions)
	if err == nil {
		go server.Serve()
		err = server.WaitMount()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lbmount:", err)
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		if err := server.Unmount(); err != nil {
			// Busy: detach it, so the serve loop ends and the process exits.
			fmt.Fprintln(os.Stderr, "lbmount:", err, "- detaching")
			if err := syscall.Unmount(flag.Arg(1), syscall.MNT_DETACH); err != nil {
				fmt.Fprintln(os.Stderr, "lbmount:", err)
			}
		}
	}()
	server.Wait()
}
