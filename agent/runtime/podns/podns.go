package podns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// Kind is a namespace type as named under /proc/<pid>/ns.
type Kind string

const (
	Net Kind = "net"
	IPC Kind = "ipc"
	UTS Kind = "uts"
)

var cloneFlags = map[Kind]int{Net: unix.CLONE_NEWNET, IPC: unix.CLONE_NEWIPC, UTS: unix.CLONE_NEWUTS}

// Spec asks for one namespace bind-mounted at Path.
type Spec struct {
	Kind Kind
	Path string
}

// Create makes new namespaces of the given kinds, each held by a bind
// mount at its path (parent directories are created). When a UTS namespace
// is among them and hostname is not empty, the hostname is set in it. On
// error nothing is left behind.
func Create(hostname string, specs ...Spec) (err error) {
	flags := 0
	var created []string
	defer func() {
		if err != nil {
			Remove(created...)
		}
	}()
	for _, s := range specs {
		f, ok := cloneFlags[s.Kind]
		if !ok {
			return fmt.Errorf("podns: unknown namespace kind %q", s.Kind)
		}
		flags |= f
		if err := os.MkdirAll(filepath.Dir(s.Path), 0o700); err != nil {
			return fmt.Errorf("podns: %w", err)
		}
		f2, err := os.OpenFile(s.Path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o400)
		if err != nil {
			return fmt.Errorf("podns: create mount point for the %s namespace: %w", s.Kind, err)
		}
		f2.Close()
		created = append(created, s.Path)
	}

	done := make(chan error, 1)
	// A fresh goroutine on a locked thread: if switching back fails the
	// thread stays locked and dies with the goroutine, so no other
	// goroutine ever runs in the wrong namespaces.
	go func() {
		runtime.LockOSThread()
		tid := unix.Gettid()
		orig := map[Kind]*os.File{}
		for _, s := range specs {
			f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/%s", tid, s.Kind))
			if err != nil {
				done <- fmt.Errorf("podns: open current %s namespace: %w", s.Kind, err)
				return
			}
			defer f.Close()
			orig[s.Kind] = f
		}
		if err := unix.Unshare(flags); err != nil {
			done <- fmt.Errorf("podns: unshare: %w", err)
			return
		}
		var werr error
		if hostname != "" && flags&unix.CLONE_NEWUTS != 0 {
			if err := unix.Sethostname([]byte(hostname)); err != nil {
				werr = fmt.Errorf("podns: set hostname %q: %w", hostname, err)
			}
		}
		for _, s := range specs {
			if werr != nil {
				break
			}
			src := fmt.Sprintf("/proc/self/task/%d/ns/%s", tid, s.Kind)
			if err := unix.Mount(src, s.Path, "none", unix.MS_BIND, ""); err != nil {
				werr = fmt.Errorf("podns: bind-mount the %s namespace at %s: %w", s.Kind, s.Path, err)
			}
		}
		for k, f := range orig {
			if err := unix.Setns(int(f.Fd()), cloneFlags[k]); err != nil {
				// Leave the thread locked: the runtime discards it.
				done <- errors.Join(werr, fmt.Errorf("podns: return to the original %s namespace: %w", k, err))
				return
			}
		}
		runtime.UnlockOSThread()
		done <- werr
	}()
	return <-done
}

// CreateNet creates a network namespace held at path.
func CreateNet(path string) error { return Create("", Spec{Net, path}) }

// Remove unmounts and deletes namespace files; missing ones are fine, so
// Remove can be repeated.
func Remove(paths ...string) error {
	var errs []error
	for _, p := range paths {
		if err := removeOne(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeOne(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("podns: unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("podns: remove %s: %w", path, err)
	}
	return nil
}

// IsNamespace reports whether path is a live namespace (an nsfs file), as
// opposed to a leftover empty mount point, e.g. after a reboot.
func IsNamespace(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// Do runs fn on a thread switched into the network namespace at path.
// Sockets fn creates stay in that namespace; processes it starts inherit it.
func Do(path string, fn func() error) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return fn() })
}
