// Package noopendir lets a go-fuse file system answer without OPENDIR and
// RELEASEDIR: FUSE_NO_OPENDIR_SUPPORT, two round trips fewer per directory listed.
//
//	raw := noopendir.Wrap(fs.NewNodeFS(root, opts))
//	opts.MountOptions.ExtraCapabilities |= fuse.CAP_NO_OPENDIR_SUPPORT
//	server, err := fuse.NewServer(raw, mountpoint, &opts.MountOptions)
//
// toh-mount (fusefence) mounts with it, and so does bench/fuse/lbmount, which
// measures go-fuse's loopback with toh-mount's options.
//
// # How
//
// A kernel that offers FUSE_NO_OPENDIR_SUPPORT at INIT (Linux 5.1 and later) takes
// ENOSYS from the first OPENDIR as "this file system keeps no directory handles":
// it sends no OPENDIR or RELEASEDIR again on that connection and opens every
// directory with the open flags FOPEN_KEEP_CACHE|FOPEN_CACHE_DIR, so listings keep
// the kernel's page cache as a daemon answering FOPEN_CACHE_DIR would ask for
// (fs/fuse/file.c, fuse_file_open: "Default for no-open"). READDIR and
// READDIRPLUS then arrive with file handle 0, which go-fuse's bridge cannot list
// (its handle 0 is a placeholder with no directory stream). Wrap serves each one
// by opening a bridge handle for the request (the node's OpendirHandle or
// Opendir/Readdir as usual), reading from it, and releasing it before answering:
// no handle outlives the request, so none can outlive its node (go-fuse forgets a
// node the kernel forgets, and the kernel knows of no handle here).
//
// A fresh handle starts at offset 0, so a READDIR at a later offset makes the
// bridge seek the handle there (FileSeekdirer). The directory stream must
// therefore take the offsets it handed out on any handle: go-fuse's loopback
// stream does (they are the host's d_off, and a seek is lseek(2) on a fresh
// descriptor of the host directory); a stream whose offsets are indices into a
// listing read at open would skip or repeat entries when the directory changed
// between two requests of one listing.
//
// A kernel without FUSE_NO_OPENDIR_SUPPORT gets OPENDIR answered as before.
package noopendir

import (
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS answers OPENDIR with ENOSYS where the kernel allows it and serves READDIR
// and READDIRPLUS without a handle; every other request goes to the wrapped file
// system.
type FS struct {
	fuse.RawFileSystem

	server *fuse.Server
	once   sync.Once
	on     bool // the kernel offered FUSE_NO_OPENDIR_SUPPORT
}

// Wrap returns raw (normally fs.NewNodeFS's bridge) without directory handles.
func Wrap(raw fuse.RawFileSystem) *FS { return &FS{RawFileSystem: raw} }

func (w *FS) Init(s *fuse.Server) {
	w.server = s
	w.RawFileSystem.Init(s)
}

// supported reports whether the kernel offered FUSE_NO_OPENDIR_SUPPORT; an older
// kernel would fail every opendir(3) with the ENOSYS.
func (w *FS) supported() bool {
	w.once.Do(func() {
		w.on = w.server != nil && w.server.KernelSettings().Flags64()&fuse.CAP_NO_OPENDIR_SUPPORT != 0
	})
	return w.on
}

func (w *FS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if w.supported() {
		return fuse.ENOSYS // the protocol's "no OPENDIR", not an error the caller sees
	}
	return w.RawFileSystem.OpenDir(cancel, in, out)
}

func (w *FS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return w.read(cancel, in, out, w.RawFileSystem.ReadDir)
}

func (w *FS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return w.read(cancel, in, out, w.RawFileSystem.ReadDirPlus)
}

// read serves a READDIR or READDIRPLUS through a handle opened for it alone. A
// request with a handle (one opened before, on a kernel without the capability)
// goes through unchanged.
func (w *FS) read(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList,
	read func(<-chan struct{}, *fuse.ReadIn, *fuse.DirEntryList) fuse.Status) fuse.Status {
	if in.Fh != 0 {
		return read(cancel, in, out)
	}
	open := fuse.OpenIn{InHeader: in.InHeader, Flags: syscall.O_RDONLY | syscall.O_DIRECTORY}
	var opened fuse.OpenOut
	if st := w.RawFileSystem.OpenDir(cancel, &open, &opened); !st.Ok() {
		return st
	}
	defer w.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: in.InHeader, Fh: opened.Fh})
	req := *in
	req.Fh = opened.Fh
	return read(cancel, &req, out)
}
