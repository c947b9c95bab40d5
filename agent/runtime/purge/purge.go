package purge

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
)

// Snapshotters whose snapshots are removed: the runtime's default and the
// one tests fall back to.
var Snapshotters = []string{"overlayfs", "native"}

// DeleteNamespace kills every task in the containerd namespace ns, removes
// its containers, images, leases, snapshots and content, then the
// namespace and its empty cgroups. It goes on after an error and returns
// all of them joined; a namespace that does not exist is not an error, so
// it can be repeated.
func DeleteNamespace(ctx context.Context, client *containerd.Client, ns string) error {
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(ctx, ns), 2*time.Minute)
	defer cancel()
	var errs []error

	ctrs, err := client.Containers(ctx)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range ctrs {
		if task, err := c.Task(ctx, nil); err == nil {
			if st, err := task.Wait(ctx); err == nil {
				if err := task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("kill %s: %w", c.ID(), err))
				}
				select {
				case <-st:
				case <-time.After(30 * time.Second):
				}
			}
			if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete task %s: %w", c.ID(), err))
			}
		}
		if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete container %s: %w", c.ID(), err))
		}
	}

	is := client.ImageService()
	imgs, err := is.List(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("list images: %w", err))
	}
	for _, img := range imgs {
		if err := is.Delete(ctx, img.Name, images.SynchronousDelete()); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete image %s: %w", img.Name, err))
		}
	}

	ls := client.LeasesService()
	lss, err := ls.List(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("list leases: %w", err))
	}
	for _, l := range lss {
		if err := ls.Delete(ctx, l, leases.SynchronousDelete); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete lease %s: %w", l.ID, err))
		}
	}

	for _, sn := range Snapshotters {
		if err := removeSnapshots(ctx, client.SnapshotService(sn)); err != nil {
			errs = append(errs, fmt.Errorf("snapshotter %s: %w", sn, err))
		}
	}

	cs := client.ContentStore()
	var blobs []content.Info
	if err := cs.Walk(ctx, func(info content.Info) error {
		blobs = append(blobs, info)
		return nil
	}); err != nil {
		errs = append(errs, fmt.Errorf("walk content: %w", err))
	}
	for _, b := range blobs {
		if err := cs.Delete(ctx, b.Digest); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete blob %s: %w", b.Digest, err))
		}
	}

	if err := client.NamespaceService().Delete(ctx, ns); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete namespace: %w", err))
	}
	if err := removeCgroups(ns); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeCgroups removes the empty parent cgroups runc leaves at /<ns> (it
// removes only each container's own cgroup).
func removeCgroups(ns string) error {
	if ns == "" || systemdUnit(ns) {
		// Not runc's: a namespace named like a systemd unit must not
		// cost systemd its empty cgroups.
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", ns))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", ns))
	var errs []error
	for _, d := range dirs {
		var sub []string
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				sub = append(sub, p)
			}
			return nil
		})
		for i := len(sub) - 1; i >= 0; i-- { // children before parents
			if err := os.Remove(sub[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", sub[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeSnapshots removes leaves until none are left; a snapshot with
// children cannot be removed before them.
func removeSnapshots(ctx context.Context, sn snapshots.Snapshotter) error {
	for round := 0; round < 100; round++ {
		parents := map[string]bool{}
		var all []string
		if err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
			all = append(all, info.Name)
			if info.Parent != "" {
				parents[info.Parent] = true
			}
			return nil
		}); err != nil {
			return err
		}
		if len(all) == 0 {
			return nil
		}
		for _, name := range all {
			if parents[name] {
				continue
			}
			if err := sn.Remove(ctx, name); err != nil && !errdefs.IsNotFound(err) {
				return fmt.Errorf("remove snapshot %s: %w", name, err)
			}
		}
	}
	return errors.New("snapshots left after 100 rounds")
}

func systemdUnit(name string) bool {
	for _, suffix := range []string{".slice", ".scope", ".service"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}
