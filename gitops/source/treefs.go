package source

import (
	"errors"
	"io"
	"io/fs"
	"path"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TreeFS serves a commit's tree straight from the object store, so a
// revision is read without a worktree checkout that could be left half
// written.
type TreeFS struct {
	root *object.Tree
	// mtime is the commit time, reported as every file's modification time.
	mtime time.Time
}

var (
	_ fs.FS        = (*TreeFS)(nil)
	_ fs.ReadDirFS = (*TreeFS)(nil)
	_ fs.StatFS    = (*TreeFS)(nil)
)

// NewTreeFS serves tree; mtime is reported for every entry.
func NewTreeFS(tree *object.Tree, mtime time.Time) *TreeFS {
	return &TreeFS{root: tree, mtime: mtime}
}

func (t *TreeFS) entry(name string) (*object.TreeEntry, *object.Tree, error) {
	if !fs.ValidPath(name) {
		return nil, nil, fs.ErrInvalid
	}
	if name == "." {
		return nil, t.root, nil
	}
	e, err := t.root.FindEntry(name)
	if err != nil {
		return nil, nil, fs.ErrNotExist
	}
	if e.Mode == filemode.Dir {
		sub, err := t.root.Tree(name)
		if err != nil {
			return nil, nil, fs.ErrNotExist
		}
		return e, sub, nil
	}
	return e, nil, nil
}

// Open opens a file or directory of the tree.
func (t *TreeFS) Open(name string) (fs.File, error) {
	e, dir, err := t.entry(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	info := &entryInfo{name: path.Base(name), mtime: t.mtime, dir: dir != nil}
	if e != nil {
		info.mode = e.Mode
	}
	if dir != nil {
		return &dirFile{info: info, fsys: t, name: name}, nil
	}
	if e.Mode != filemode.Regular && e.Mode != filemode.Executable && e.Mode != filemode.Deprecated {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("not a regular file (symlink or submodule)")}
	}
	f, err := t.root.TreeEntryFile(e)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	r, err := f.Reader()
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	info.size = f.Size
	return &blobFile{info: info, r: r}, nil
}

// Stat describes a file or directory of the tree.
func (t *TreeFS) Stat(name string) (fs.FileInfo, error) {
	e, dir, err := t.entry(name)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	info := &entryInfo{name: path.Base(name), mtime: t.mtime, dir: dir != nil}
	if e != nil {
		info.mode = e.Mode
		if dir == nil {
			if f, err := t.root.TreeEntryFile(e); err == nil {
				info.size = f.Size
			}
		}
	}
	return info, nil
}

// ReadDir lists a directory in name order (git keeps trees sorted).
func (t *TreeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	_, dir, err := t.entry(name)
	if err == nil && dir == nil {
		err = errors.New("not a directory")
	}
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	out := make([]fs.DirEntry, 0, len(dir.Entries))
	for _, e := range dir.Entries {
		out = append(out, &entryInfo{name: e.Name, mode: e.Mode, dir: e.Mode == filemode.Dir, mtime: t.mtime,
			sizeFn: func() int64 {
				if f, err := dir.TreeEntryFile(&e); err == nil {
					return f.Size
				}
				return 0
			}})
	}
	return out, nil
}

type entryInfo struct {
	name   string
	mode   filemode.FileMode
	dir    bool
	size   int64
	sizeFn func() int64
	mtime  time.Time
}

func (i *entryInfo) Name() string { return i.name }
func (i *entryInfo) Size() int64 {
	if i.sizeFn != nil {
		return i.sizeFn()
	}
	return i.size
}
func (i *entryInfo) Mode() fs.FileMode {
	switch {
	case i.dir:
		return fs.ModeDir | 0o555
	case i.mode == filemode.Symlink:
		return fs.ModeSymlink | 0o777
	case i.mode == filemode.Submodule:
		return fs.ModeIrregular
	case i.mode == filemode.Executable:
		return 0o555
	}
	return 0o444
}
func (i *entryInfo) ModTime() time.Time         { return i.mtime }
func (i *entryInfo) IsDir() bool                { return i.dir }
func (i *entryInfo) Sys() any                   { return nil }
func (i *entryInfo) Type() fs.FileMode          { return i.Mode().Type() }
func (i *entryInfo) Info() (fs.FileInfo, error) { return i, nil }

type blobFile struct {
	info *entryInfo
	r    io.ReadCloser
}

func (f *blobFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *blobFile) Read(b []byte) (int, error) { return f.r.Read(b) }
func (f *blobFile) Close() error               { return f.r.Close() }

type dirFile struct {
	info    *entryInfo
	fsys    *TreeFS
	name    string
	entries []fs.DirEntry
	read    bool
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.name, Err: errors.New("is a directory")}
}
func (d *dirFile) Close() error { return nil }

func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if !d.read {
		es, err := d.fsys.ReadDir(d.name)
		if err != nil {
			return nil, err
		}
		d.entries, d.read = es, true
	}
	if n <= 0 {
		es := d.entries
		d.entries = nil
		return es, nil
	}
	if len(d.entries) == 0 {
		return nil, io.EOF
	}
	if n > len(d.entries) {
		n = len(d.entries)
	}
	es := d.entries[:n]
	d.entries = d.entries[n:]
	return es, nil
}
