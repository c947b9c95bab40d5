package volumes

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"flotilla.dev/flotilla/internal/mountinfo"
	"flotilla.dev/flotilla/internal/testenv"
)

type fakeObjects struct {
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
}

func (f *fakeObjects) ConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	if cm, ok := f.cms[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func (f *fakeObjects) Secret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	changed, err := WriteAtomic(dir, map[string]File{"a": {Data: []byte("1"), Mode: 0o644}, "sub/b": {Data: []byte("2"), Mode: 0o600}})
	if err != nil || !changed {
		t.Fatalf("first write = %v, %v", changed, err)
	}
	if read(t, filepath.Join(dir, "a")) != "1" || read(t, filepath.Join(dir, "sub/b")) != "2" {
		t.Fatal("content not visible through the links")
	}
	if l, _ := os.Readlink(filepath.Join(dir, "a")); l != "..data/a" {
		t.Fatalf("a links to %q", l)
	}
	st, _ := os.Stat(filepath.Join(dir, "sub/b"))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v", st.Mode())
	}
	ts1, _ := os.Readlink(filepath.Join(dir, "..data"))

	changed, err = WriteAtomic(dir, map[string]File{"a": {Data: []byte("1"), Mode: 0o644}, "sub/b": {Data: []byte("2"), Mode: 0o600}})
	if err != nil || changed {
		t.Fatalf("same content rewritten: %v, %v", changed, err)
	}

	changed, err = WriteAtomic(dir, map[string]File{"a": {Data: []byte("one"), Mode: 0o644}, "c": {Data: []byte("3"), Mode: 0o644}})
	if err != nil || !changed {
		t.Fatalf("update = %v, %v", changed, err)
	}
	ts2, _ := os.Readlink(filepath.Join(dir, "..data"))
	if ts1 == ts2 {
		t.Fatal("..data not swapped")
	}
	if _, err := os.Stat(filepath.Join(dir, ts1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("old content dir left behind")
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("link of a removed key left behind")
	}
	if read(t, filepath.Join(dir, "a")) != "one" || read(t, filepath.Join(dir, "c")) != "3" {
		t.Fatal("updated content not visible")
	}
	for _, bad := range []string{"../x", "/abs", "..data", "a/../../x"} {
		if _, err := WriteAtomic(dir, map[string]File{bad: {}}); err == nil {
			t.Errorf("path %q accepted", bad)
		}
	}
}

func pod(vols ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{Volumes: vols, Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}}}},
	}
}

func i32(v int32) *int32 { return &v }
func yes() *bool         { b := true; return &b }

func TestConfigMapDownwardAndErrors(t *testing.T) {
	objs := &fakeObjects{cms: map[string]*corev1.ConfigMap{
		"ns/cfg": {Data: map[string]string{"app.conf": "color=blue\n", "other": "x"}, BinaryData: map[string][]byte{"bin": {0, 1}}},
	}}
	m, err := New(t.TempDir(), objs)
	if err != nil {
		t.Fatal(err)
	}
	p := pod(
		corev1.Volume{Name: "all", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, DefaultMode: i32(0o640)}}},
		corev1.Volume{Name: "items", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
			Items: []corev1.KeyToPath{{Key: "app.conf", Path: "etc/app.conf", Mode: i32(0o600)}}}}},
		corev1.Volume{Name: "maybe", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: yes()}}},
		corev1.Volume{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "mem", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
		}}}},
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	)
	vols, err := m.SetUp(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	all := vols["all"]
	if !all.ReadOnly || read(t, filepath.Join(all.Path, "app.conf")) != "color=blue\n" || read(t, filepath.Join(all.Path, "bin")) != "\x00\x01" {
		t.Fatalf("all = %+v", all)
	}
	if st, _ := os.Stat(filepath.Join(all.Path, "other")); st.Mode().Perm() != 0o640 {
		t.Fatalf("defaultMode: %v", st.Mode())
	}
	items := vols["items"].Path
	if read(t, filepath.Join(items, "etc/app.conf")) != "color=blue\n" {
		t.Fatal("item path")
	}
	if _, err := os.Stat(filepath.Join(items, "other")); err == nil {
		t.Fatal("items must select keys")
	}
	ents, _ := os.ReadDir(vols["maybe"].Path)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "..") {
			t.Fatalf("optional missing configmap shows %s", e.Name())
		}
	}
	info := vols["info"].Path
	if read(t, filepath.Join(info, "name")) != "p" || read(t, filepath.Join(info, "labels")) != `app="x"` || read(t, filepath.Join(info, "mem")) != "128" {
		t.Fatal("downward API content")
	}
	if st, _ := os.Stat(vols["scratch"].Path); !st.IsDir() || st.Mode().Perm() != 0o777 || vols["scratch"].ReadOnly {
		t.Fatalf("emptyDir = %v", st.Mode())
	}

	// The ConfigMap changes: the volume follows; labels change: the
	// downward API file follows.
	objs.cms["ns/cfg"] = &corev1.ConfigMap{Data: map[string]string{"app.conf": "color=red\n"}}
	p.Labels["app"] = "y"
	if _, err := m.SetUp(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if read(t, filepath.Join(all.Path, "app.conf")) != "color=red\n" || read(t, filepath.Join(info, "labels")) != `app="y"` {
		t.Fatal("update not applied")
	}
	if _, err := os.Lstat(filepath.Join(all.Path, "other")); err == nil {
		t.Fatal("removed key still visible")
	}

	// Errors name the volume and say what is wrong, like Kubernetes; the
	// good volumes are still returned.
	bad := pod(
		corev1.Volume{Name: "ok", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "gone", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}}}},
		corev1.Volume{Name: "key", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "missing", Path: "m"}}}}},
		corev1.Volume{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "nope"}}},
		corev1.Volume{Name: "pvc", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
	)
	bad.UID = "uid-2"
	vols, err = m.SetUp(context.Background(), bad)
	if _, ok := vols["ok"]; !ok || len(vols) != 1 {
		t.Fatalf("vols = %v", vols)
	}
	for _, want := range []string{
		`MountVolume.SetUp failed for volume "gone" : configmap "nope" not found`,
		`MountVolume.SetUp failed for volume "key" : configmap references non-existent config key: missing`,
		`MountVolume.SetUp failed for volume "sec" : secret "nope" not found`,
		`MountVolume.SetUp failed for volume "pvc" : volume type is not supported by flotilla: persistentVolumeClaim`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	var verr *Error
	if !errors.As(err, &verr) || !errors.Is(err, ErrUnsupported) {
		t.Errorf("err types: %v", err)
	}

	uids, _ := m.PodUIDs()
	if len(uids) != 2 {
		t.Fatalf("pod dirs = %v", uids)
	}
	if err := m.TearDown(p.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.PodDir(p.UID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("pod dir left")
	}
	if err := m.TearDown(p.UID); err != nil {
		t.Fatalf("second teardown: %v", err)
	}
}

func TestHostPathTypes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	typ := func(t corev1.HostPathType) *corev1.HostPathType { return &t }
	cases := []struct {
		path string
		typ  *corev1.HostPathType
		want string // "" = ok
	}{
		{filepath.Join(dir, "nothing"), nil, ""},
		{dir, typ(corev1.HostPathDirectory), ""},
		{filepath.Join(dir, "nothing"), typ(corev1.HostPathDirectory), "is not a directory"},
		{file, typ(corev1.HostPathDirectory), "is not a directory"},
		{filepath.Join(dir, "made/deep"), typ(corev1.HostPathDirectoryOrCreate), ""},
		{file, typ(corev1.HostPathDirectoryOrCreate), "is not a directory"},
		{file, typ(corev1.HostPathFile), ""},
		{dir, typ(corev1.HostPathFile), "is not a file"},
		{filepath.Join(dir, "newfile"), typ(corev1.HostPathFileOrCreate), ""},
		{filepath.Join(dir, "no/parent/file"), typ(corev1.HostPathFileOrCreate), "cannot create file"},
		{sock, typ(corev1.HostPathSocket), ""},
		{file, typ(corev1.HostPathSocket), "is not a socket file"},
		{"/dev/null", typ(corev1.HostPathCharDev), ""},
		{file, typ(corev1.HostPathCharDev), "is not a character device"},
		{"/dev/null", typ(corev1.HostPathBlockDev), "is not a block device"},
		{"relative", nil, "must be absolute"},
	}
	for _, tc := range cases {
		err := checkHostPath(&corev1.HostPathVolumeSource{Path: tc.path, Type: tc.typ})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %v: %v", tc.path, tc.typ, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %v: err = %v, want %q", tc.path, tc.typ, err, tc.want)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "made/deep")); err != nil || !st.IsDir() {
		t.Error("DirectoryOrCreate did not create")
	}
	if st, err := os.Stat(filepath.Join(dir, "newfile")); err != nil || !st.Mode().IsRegular() {
		t.Error("FileOrCreate did not create")
	}
}

// TestHostRoot: with HostRoot, hostPath volumes resolve (and are
// created) under it, not on the machine.
func TestHostRoot(t *testing.T) {
	m, err := New(t.TempDir(), &fakeObjects{})
	if err != nil {
		t.Fatal(err)
	}
	m.HostRoot = t.TempDir()
	dirOrCreate, fileOrCreate := corev1.HostPathDirectoryOrCreate, corev1.HostPathFileOrCreate
	p := pod(
		corev1.Volume{Name: "logs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log/sim", Type: &dirOrCreate}}},
		corev1.Volume{Name: "etc", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: &fileOrCreate}}},
	)
	vols, err := m.SetUp(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), `"etc"`) {
		t.Errorf("SetUp: err = %v, want the volume etc to fail (its root is a directory)", err)
	}
	want := filepath.Join(m.HostRoot, "var/log/sim")
	if got := vols["logs"].Path; got != want {
		t.Errorf("hostPath /var/log/sim is at %q, want %q", got, want)
	}
	if st, err := os.Stat(want); err != nil || !st.IsDir() {
		t.Errorf("DirectoryOrCreate did not create %s: %v", want, err)
	}
}

func TestSubPath(t *testing.T) {
	vol := t.TempDir()
	os.Symlink("/etc", filepath.Join(vol, "escape"))
	os.MkdirAll(filepath.Join(vol, "data"), 0o755)
	os.Symlink("data", filepath.Join(vol, "inside"))
	got, err := SubPath(vol, "new/dir")
	if err != nil || got != filepath.Join(vol, "new/dir") {
		t.Fatalf("new subPath = %q, %v", got, err)
	}
	if st, err := os.Stat(got); err != nil || !st.IsDir() {
		t.Fatal("subPath not created")
	}
	if got, err := SubPath(vol, "inside"); err != nil || got != filepath.Join(vol, "data") {
		t.Fatalf("inside = %q, %v", got, err)
	}
	for _, bad := range []string{"../x", "a/../../x", "/etc", "escape"} {
		if _, err := SubPath(vol, bad); err == nil {
			t.Errorf("subPath %q accepted", bad)
		}
	}
}

func TestTmpfsVolumes(t *testing.T) {
	testenv.RequireRoot(t, "mounts tmpfs")
	objs := &fakeObjects{secrets: map[string]*corev1.Secret{"ns/creds": {Data: map[string][]byte{"password": []byte("s3cret")}}}}
	m, err := New(t.TempDir(), objs)
	if err != nil {
		t.Fatal(err)
	}
	size := resource.MustParse("1Mi")
	p := pod(
		corev1.Volume{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}}},
		corev1.Volume{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", Items: []corev1.KeyToPath{{Key: "password", Path: "pw", Mode: i32(0o400)}}}}},
	)
	t.Cleanup(func() { m.TearDown(p.UID) })
	vols, err := m.SetUp(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mem", "sec"} {
		var st unix.Statfs_t
		if err := unix.Statfs(vols[name].Path, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
			t.Fatalf("%s is not on a tmpfs", name)
		}
	}
	var st unix.Statfs_t
	unix.Statfs(vols["mem"].Path, &st)
	if got := st.Blocks * uint64(st.Bsize); got != 1<<20 {
		t.Errorf("sizeLimit: tmpfs has %d bytes", got)
	}
	if read(t, filepath.Join(vols["sec"].Path, "pw")) != "s3cret" {
		t.Fatal("secret content")
	}
	// A second SetUp does not stack mounts.
	if _, err := m.SetUp(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	mounts, _ := mountinfo.Under(m.PodDir(p.UID))
	if len(mounts) != 2 {
		t.Fatalf("mounts = %v", mounts)
	}
	if err := m.TearDown(p.UID); err != nil {
		t.Fatal(err)
	}
	if mounts, _ := mountinfo.Under(m.PodDir(p.UID)); len(mounts) != 0 {
		t.Fatalf("left mounted: %v", mounts)
	}
}
