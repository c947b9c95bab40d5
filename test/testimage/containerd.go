package testimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
)

// ContainerdSocket is where tests find containerd.
const ContainerdSocket = "/run/containerd/containerd.sock"

// Containerd connects to the machine's containerd and creates a containerd
// namespace unique to the test. At cleanup everything in it is removed
// (tasks killed, containers, images, leases, snapshots, content) and then
// the namespace itself. The test skips when not root or when containerd
// does not answer.
func Containerd(t testing.TB) (*containerd.Client, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("containerd tests need root")
	}
	if _, err := os.Stat(ContainerdSocket); err != nil {
		t.Skipf("containerd is not running (%v); start it with scripts/install-deps.sh", err)
	}
	client, err := containerd.New(ContainerdSocket, containerd.WithTimeout(5*time.Second))
	if err != nil {
		t.Skipf("containerd at %s does not answer (%v); start it with scripts/install-deps.sh", ContainerdSocket, err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns := "flotilla-test-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
	ctx := namespaces.WithNamespace(context.Background(), ns)
	if err := client.NamespaceService().Create(ctx, ns, map[string]string{"flotilla.dev/test": "true"}); err != nil {
		client.Close()
		t.Fatalf("create containerd namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		defer client.Close()
		if err := DeleteNamespace(context.Background(), client, ns); err != nil {
			t.Errorf("clean up containerd namespace %s: %v", ns, err)
		}
	})
	return client, ns
}

// DeleteNamespace removes everything in a containerd namespace and then the
// namespace.
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

	for _, sn := range []string{"overlayfs", "native"} {
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
