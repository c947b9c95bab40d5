package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/moby/sys/user"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// defaultPath is the environment of an image that sets none, as
// containerd and Docker give it.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// withImageConfig applies an image's config to a Linux spec as
// containerd's oci.WithImageConfig does: environment, entrypoint and
// command, working directory, and the user with its groups from the
// image's /etc/passwd and /etc/group.
//
// It is written here, not taken from containerd, for the agent's
// footprint: containerd reads those files through its mount view, which
// executes text/template, and a reachable template execution makes the
// linker keep every exported method of every type in the binary. That
// was 12 MB of the agent's 52 MB. This one mounts the container's
// snapshot read-only and reads the files through an os.Root.
func withImageConfig(ic ocispec.ImageConfig) oci.SpecOpts {
	return func(ctx context.Context, client oci.Client, c *containers.Container, s *oci.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		env := ic.Env
		if len(env) == 0 {
			env = []string{defaultPath}
		}
		// What the spec holds already overrides the image, as in
		// containerd (oci.WithEnv's rules: KEY=VALUE replaces, a bare KEY
		// removes).
		set := s.Process.Env
		s.Process.Env = slices.Clone(env)
		if err := oci.WithEnv(set)(ctx, client, c, s); err != nil {
			return err
		}
		s.Process.Args = slices.Concat(ic.Entrypoint, ic.Cmd)
		s.Process.Cwd = ic.WorkingDir
		if s.Process.Cwd == "" {
			s.Process.Cwd = "/"
		}
		return withRootFS(ctx, client, c, func(root fs.FS) error {
			u, err := imageUser(root, ic.User)
			if err != nil {
				return err
			}
			s.Process.User = u
			return nil
		})
	}
}

// withRootFS calls fn with the container's root filesystem, mounted
// read-only for the call.
func withRootFS(ctx context.Context, client oci.Client, c *containers.Container, fn func(fs.FS) error) error {
	if c.Snapshotter == "" || c.SnapshotKey == "" {
		return errors.New("the container has no rootfs snapshot yet")
	}
	mounts, err := client.SnapshotService(c.Snapshotter).Mounts(ctx, c.SnapshotKey)
	if err != nil {
		return fmt.Errorf("the rootfs snapshot's mounts: %w", err)
	}
	return mount.WithReadonlyTempMount(ctx, mounts, func(dir string) error {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return err
		}
		defer root.Close()
		return fn(root.FS())
	})
}

// imageUser resolves an image's USER ("", "uid", "name", "uid:gid",
// "name:group" and mixes) against its /etc/passwd and /etc/group as
// containerd does: a numeric uid missing from /etc/passwd runs with gid
// 0, a name missing is an error, and the supplementary groups are those
// of /etc/group that list the user (root when USER is empty), the
// primary group first.
func imageUser(root fs.FS, userstr string) (specs.User, error) {
	var u specs.User
	name, group, hasGroup := strings.Cut(userstr, ":")
	if strings.Contains(group, ":") {
		return u, fmt.Errorf("invalid USER value %q", userstr)
	}
	uid, uidNumeric, err := parseID(name, "uid", userstr)
	if err != nil {
		return u, err
	}
	gid, gidNumeric, err := parseID(group, "gid", userstr)
	if err != nil {
		return u, err
	}
	// member is the name /etc/group lists the user by.
	member := "root"
	switch {
	case userstr == "":
	case !uidNumeric:
		pw, err := oci.UserFromFS(root, func(p user.User) bool { return p.Name == name })
		if err != nil {
			return u, fmt.Errorf("USER %q: %w", userstr, err)
		}
		u.UID, u.GID, member = uint32(pw.Uid), uint32(pw.Gid), pw.Name
	default:
		u.UID = uid
		pw, err := oci.UserFromFS(root, func(p user.User) bool { return p.Uid == int(uid) })
		switch {
		case err == nil:
			u.GID, member = uint32(pw.Gid), pw.Name
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, oci.ErrNoUsersFound):
			member = ""
		default:
			return u, fmt.Errorf("USER %q: %w", userstr, err)
		}
	}
	if hasGroup {
		if gidNumeric {
			u.GID = gid
		} else if u.GID, err = oci.GIDFromFS(root, func(g user.Group) bool { return g.Name == group }); err != nil {
			return u, fmt.Errorf("USER %q: group %q: %w", userstr, group, err)
		}
	}
	if member != "" {
		f, err := root.Open("etc/group")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return u, err
		}
		if err == nil {
			groups, err := user.ParseGroupFilter(f, func(g user.Group) bool {
				return g.Name != member && slices.Contains(g.List, member)
			})
			f.Close()
			if err != nil {
				return u, fmt.Errorf("/etc/group: %w", err)
			}
			for _, g := range groups {
				u.AdditionalGids = append(u.AdditionalGids, uint32(g.Gid))
			}
		}
	}
	if !slices.Contains(u.AdditionalGids, u.GID) {
		u.AdditionalGids = append([]uint32{u.GID}, u.AdditionalGids...)
	}
	return u, nil
}

// parseID reads one side of USER: a number (within what runc accepts)
// or a name; "" is 0.
func parseID(s, what, userstr string) (id uint32, numeric bool, err error) {
	if s == "" {
		return 0, true, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, false, fmt.Errorf("invalid USER value %q: %s out of range", userstr, what)
		}
		return 0, false, nil
	}
	if n < 0 || n > math.MaxInt32 {
		return 0, false, fmt.Errorf("invalid USER value %q: %s out of range", userstr, what)
	}
	return uint32(n), true, nil
}
