package runtime

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestImageUserAsContainerd resolves USER values against one rootfs with
// imageUser and with containerd's oci.WithImageConfig steps (WithUser,
// then WithAdditionalGIDs), which the agent no longer links: both must
// give the same user, groups and errors.
func TestImageUserAsContainerd(t *testing.T) {
	rootfs := t.TempDir()
	os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755)
	os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte(`root:x:0:0:root:/root:/bin/sh
app:x:1000:1000::/home/app:/bin/sh
svc:x:1001:2000::/srv:/bin/sh
`), 0o644)
	os.WriteFile(filepath.Join(rootfs, "etc", "group"), []byte(`root:x:0:root
wheel:x:10:root,app
app:x:1000:app
staff:x:50:app,svc
svcgrp:x:2000:
`), 0o644)
	empty := t.TempDir()
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	bare, err := os.OpenRoot(empty)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()

	containerdUser := func(dir, userstr string) (specs.User, error) {
		s := &oci.Spec{Root: &specs.Root{Path: dir}, Process: &specs.Process{}, Linux: &specs.Linux{}}
		c := &containers.Container{}
		ctx := context.Background()
		if userstr == "" {
			err := oci.WithAdditionalGIDs("root")(ctx, nil, c, s)
			return s.Process.User, err
		}
		if err := oci.WithUser(userstr)(ctx, nil, c, s); err != nil {
			return s.Process.User, err
		}
		err := oci.WithAdditionalGIDs(strconv.FormatInt(int64(s.Process.User.UID), 10))(ctx, nil, c, s)
		return s.Process.User, err
	}
	for _, fsys := range []struct {
		name string
		dir  string
		root *os.Root
	}{{"with passwd", rootfs, root}, {"without passwd", empty, bare}} {
		for _, userstr := range []string{"", "0", "app", "1000", "1001", "4242", "svc", "nobody", "app:staff", "1000:50", "4242:7",
			"app:7", "4242:staff", "app:nogroup", "1000:", ":50", "99999999999", "1:99999999999", "-1", "a:b:c"} {
			want, wantErr := containerdUser(fsys.dir, userstr)
			got, err := imageUser(fsys.root.FS(), userstr)
			if (err != nil) != (wantErr != nil) {
				t.Errorf("%s, USER %q: error %v, containerd's %v", fsys.name, userstr, err, wantErr)
				continue
			}
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Errorf("%s, USER %q: %+v, containerd gives %+v", fsys.name, userstr, got, want)
			}
		}
	}
}
