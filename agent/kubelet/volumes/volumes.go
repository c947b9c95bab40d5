package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/agent/kubelet/envvars"
	"flotilla.dev/flotilla/internal/mountinfo"
)

// Objects reads the ConfigMaps and Secrets volumes are made from; a
// missing object is an error for which apierrors.IsNotFound is true.
type Objects interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// Volume is a pod volume ready on the host.
type Volume struct {
	// Path is the host path containers bind-mount.
	Path string
	// ReadOnly volumes (configMap, secret, downwardAPI, projected) are
	// mounted read-only whatever the volumeMount says, as in Kubernetes.
	ReadOnly bool
}

// Error is a volume that could not be set up.
type Error struct {
	Volume string
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", e.Volume, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrUnsupported is wrapped by errors for volume types Flotilla has not.
var ErrUnsupported = errors.New("volume type is not supported by flotilla")

// Manager sets up and tears down pods' volumes under one root directory.
type Manager struct {
	// HostRoot, when set, is where hostPath volumes resolve (see
	// kubelet.Config.HostPathRoot); "" is the machine's root.
	HostRoot string

	root string
	objs Objects
}

// New returns a Manager keeping pods' volumes under root.
func New(root string, objs Objects) (*Manager, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("volumes: root %q must be an absolute path", root)
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	return &Manager{root: root, objs: objs}, nil
}

// PodDir is the pod's directory.
func (m *Manager) PodDir(uid types.UID) string { return filepath.Join(m.root, string(uid)) }

func (m *Manager) volumeDir(uid types.UID, kind, name string) string {
	return filepath.Join(m.PodDir(uid), "volumes", kind, name)
}

// SetUp makes every volume of pod ready and current and returns them by
// name. Volumes that fail are left out and reported together as *Error
// values joined into one error; the others are still set up.
func (m *Manager) SetUp(ctx context.Context, pod *corev1.Pod) (map[string]Volume, error) {
	out := make(map[string]Volume, len(pod.Spec.Volumes))
	var errs []error
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		vol, err := m.setUp(ctx, pod, v)
		if err != nil {
			errs = append(errs, &Error{Volume: v.Name, Err: err})
			continue
		}
		out[v.Name] = vol
	}
	return out, errors.Join(errs...)
}

func (m *Manager) setUp(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (Volume, error) {
	src := v.VolumeSource
	switch {
	case src.EmptyDir != nil:
		dir := m.volumeDir(pod.UID, "empty-dir", v.Name)
		return Volume{Path: dir}, setUpEmptyDir(dir, src.EmptyDir)
	case src.HostPath != nil:
		hp := *src.HostPath
		if m.HostRoot != "" && filepath.IsAbs(hp.Path) {
			hp.Path = filepath.Join(m.HostRoot, hp.Path)
		}
		return Volume{Path: hp.Path}, checkHostPath(&hp)
	case src.ConfigMap != nil:
		payload, err := m.configMapPayload(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, mode(src.ConfigMap.DefaultMode))
		if err != nil {
			return Volume{}, err
		}
		dir := m.volumeDir(pod.UID, "configmap", v.Name)
		_, err = WriteAtomic(dir, payload)
		return Volume{Path: dir, ReadOnly: true}, err
	case src.Secret != nil:
		payload, err := m.secretPayload(ctx, pod.Namespace, src.Secret.SecretName, src.Secret.Items, src.Secret.Optional, mode(src.Secret.DefaultMode))
		if err != nil {
			return Volume{}, err
		}
		dir := m.volumeDir(pod.UID, "secret", v.Name)
		if err := ensureTmpfs(dir, ""); err != nil {
			return Volume{}, err
		}
		_, err = WriteAtomic(dir, payload)
		return Volume{Path: dir, ReadOnly: true}, err
	case src.DownwardAPI != nil:
		payload, err := downwardPayload(pod, src.DownwardAPI.Items, mode(src.DownwardAPI.DefaultMode))
		if err != nil {
			return Volume{}, err
		}
		dir := m.volumeDir(pod.UID, "downward-api", v.Name)
		_, err = WriteAtomic(dir, payload)
		return Volume{Path: dir, ReadOnly: true}, err
	case src.Projected != nil:
		payload, secret, err := m.projectedPayload(ctx, pod, src.Projected)
		if err != nil {
			return Volume{}, err
		}
		dir := m.volumeDir(pod.UID, "projected", v.Name)
		if secret {
			if err := ensureTmpfs(dir, ""); err != nil {
				return Volume{}, err
			}
		}
		_, err = WriteAtomic(dir, payload)
		return Volume{Path: dir, ReadOnly: true}, err
	}
	return Volume{}, fmt.Errorf("%w: %s (use emptyDir, hostPath, configMap, secret, downwardAPI or projected)", ErrUnsupported, sourceKind(src))
}

func mode(m *int32) os.FileMode {
	if m == nil {
		return 0o644
	}
	return os.FileMode(*m) & 0o777
}

func itemMode(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m) & 0o777
}

func setUpEmptyDir(dir string, ed *corev1.EmptyDirVolumeSource) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if ed.Medium == corev1.StorageMediumMemory {
		var size string
		if ed.SizeLimit != nil && !ed.SizeLimit.IsZero() {
			size = strconv.FormatInt(ed.SizeLimit.Value(), 10)
		}
		if err := ensureTmpfs(dir, size); err != nil {
			return err
		}
	} else if ed.Medium != corev1.StorageMediumDefault {
		return fmt.Errorf("%w: emptyDir medium %q (use \"\" or Memory)", ErrUnsupported, ed.Medium)
	}
	// World-writable like Kubernetes' emptyDir, so any container user can
	// use it; MkdirAll's mode is filtered by the umask.
	return os.Chmod(dir, 0o777)
}

// ensureTmpfs mounts a tmpfs on dir unless one is there.
func ensureTmpfs(dir, size string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.TMPFS_MAGIC && isMountPoint(dir) {
		return nil
	}
	opts := "mode=0777"
	if size != "" {
		opts += ",size=" + size
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// isMountPoint compares the device of dir and its parent.
func isMountPoint(dir string) bool {
	var a, b unix.Stat_t
	if unix.Stat(dir, &a) != nil || unix.Stat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

func checkHostPath(hp *corev1.HostPathVolumeSource) error {
	p := hp.Path
	if !filepath.IsAbs(p) {
		return fmt.Errorf("hostPath %q must be absolute", p)
	}
	typ := corev1.HostPathUnset
	if hp.Type != nil {
		typ = *hp.Type
	}
	st, err := os.Stat(p)
	exists := err == nil
	switch typ {
	case corev1.HostPathUnset:
		return nil
	case corev1.HostPathDirectoryOrCreate:
		if !exists {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return fmt.Errorf("hostPath type check failed: cannot create directory %s: %w", p, err)
			}
			return nil
		}
		if !st.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", p)
		}
	case corev1.HostPathDirectory:
		if !exists || !st.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", p)
		}
	case corev1.HostPathFileOrCreate:
		if !exists {
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("hostPath type check failed: cannot create file %s: %w", p, err)
			}
			return f.Close()
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", p)
		}
	case corev1.HostPathFile:
		if !exists || !st.Mode().IsRegular() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", p)
		}
	case corev1.HostPathSocket:
		if !exists || st.Mode()&fs.ModeSocket == 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a socket file", p)
		}
	case corev1.HostPathCharDev:
		if !exists || st.Mode()&fs.ModeCharDevice == 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a character device", p)
		}
	case corev1.HostPathBlockDev:
		if !exists || st.Mode()&fs.ModeDevice == 0 || st.Mode()&fs.ModeCharDevice != 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a block device", p)
		}
	default:
		return fmt.Errorf("hostPath type %q is not a known type", typ)
	}
	return nil
}

func (m *Manager) configMapPayload(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool, def os.FileMode) (map[string]File, error) {
	cm, err := m.objs.ConfigMap(ctx, ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			if optional != nil && *optional {
				return map[string]File{}, nil
			}
			return nil, fmt.Errorf("configmap %q not found", name)
		}
		return nil, fmt.Errorf("get configmap %s/%s: %w", ns, name, err)
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return project(data, items, optional, def, "configmap references non-existent config key")
}

func (m *Manager) secretPayload(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool, def os.FileMode) (map[string]File, error) {
	s, err := m.objs.Secret(ctx, ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			if optional != nil && *optional {
				return map[string]File{}, nil
			}
			return nil, fmt.Errorf("secret %q not found", name)
		}
		return nil, fmt.Errorf("get secret %s/%s: %w", ns, name, err)
	}
	data := make(map[string][]byte, len(s.Data))
	for k, v := range s.Data {
		data[k] = v
	}
	for k, v := range s.StringData {
		data[k] = []byte(v)
	}
	return project(data, items, optional, def, "references non-existent secret key")
}

// project picks the keys items name (all keys when there are none).
func project(data map[string][]byte, items []corev1.KeyToPath, optional *bool, def os.FileMode, missing string) (map[string]File, error) {
	out := map[string]File{}
	if len(items) == 0 {
		for _, k := range sortedKeys(data) {
			if validPath(k) != nil {
				continue
			}
			out[k] = File{Data: data[k], Mode: def}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			return nil, fmt.Errorf("%s: %s", missing, it.Key)
		}
		if err := validPath(it.Path); err != nil {
			return nil, fmt.Errorf("item %s: %w", it.Key, err)
		}
		out[it.Path] = File{Data: v, Mode: itemMode(it.Mode, def)}
	}
	return out, nil
}

func downwardPayload(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, def os.FileMode) (map[string]File, error) {
	out := map[string]File{}
	for _, it := range items {
		if err := validPath(it.Path); err != nil {
			return nil, err
		}
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			v, err = envvars.FieldValue(pod, it.FieldRef, envvars.PodInfo{})
		case it.ResourceFieldRef != nil:
			v, err = envvars.ResourceValue(pod, nil, it.ResourceFieldRef, nil)
		default:
			err = fmt.Errorf("downwardAPI item %q has neither fieldRef nor resourceFieldRef", it.Path)
		}
		if err != nil {
			return nil, err
		}
		out[it.Path] = File{Data: []byte(v), Mode: itemMode(it.Mode, def)}
	}
	return out, nil
}

// projectedPayload merges the sources; secret reports whether any source
// is a Secret (the volume then lives on a tmpfs).
func (m *Manager) projectedPayload(ctx context.Context, pod *corev1.Pod, p *corev1.ProjectedVolumeSource) (map[string]File, bool, error) {
	def := mode(p.DefaultMode)
	out := map[string]File{}
	secret := false
	for _, s := range p.Sources {
		var part map[string]File
		var err error
		switch {
		case s.ConfigMap != nil:
			part, err = m.configMapPayload(ctx, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, def)
		case s.Secret != nil:
			secret = true
			part, err = m.secretPayload(ctx, pod.Namespace, s.Secret.Name, s.Secret.Items, s.Secret.Optional, def)
		case s.DownwardAPI != nil:
			part, err = downwardPayload(pod, s.DownwardAPI.Items, def)
		case s.ServiceAccountToken != nil:
			err = fmt.Errorf("%w: projected serviceAccountToken (devices authenticate with their node identity)", ErrUnsupported)
		default:
			err = fmt.Errorf("%w: this projected volume source", ErrUnsupported)
		}
		if err != nil {
			return nil, false, err
		}
		for k, v := range part {
			out[k] = v
		}
	}
	return out, secret, nil
}

func sourceKind(src corev1.VolumeSource) string {
	switch {
	case src.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case src.NFS != nil:
		return "nfs"
	case src.CSI != nil:
		return "csi"
	case src.Ephemeral != nil:
		return "ephemeral"
	case src.Image != nil:
		return "image"
	case src.GitRepo != nil:
		return "gitRepo"
	case src.ISCSI != nil:
		return "iscsi"
	}
	return "unknown or empty volume source"
}

// TearDown unmounts the pod's tmpfs volumes and removes its directory.
// Repeating it is harmless.
func (m *Manager) TearDown(uid types.UID) error {
	dir := m.PodDir(uid)
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		return fmt.Errorf("tear down volumes of pod %s: %w", uid, err)
	}
	// Deepest first.
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, mp := range mounts {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("tear down volumes of pod %s: unmount %s: %w", uid, mp, err)
		}
	}
	if len(mounts) > 0 {
		// Never delete through a mount that is still there.
		if left, _ := mountinfo.Under(dir); len(left) > 0 {
			return fmt.Errorf("tear down volumes of pod %s: still mounted: %v", uid, left)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("tear down volumes of pod %s: %w", uid, err)
	}
	return nil
}

// PodUIDs lists the pods that have a directory, for orphan cleanup.
func (m *Manager) PodUIDs() ([]types.UID, error) {
	ents, err := os.ReadDir(m.root)
	if err != nil {
		return nil, err
	}
	var out []types.UID
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, types.UID(e.Name()))
		}
	}
	return out, nil
}

// SubPath resolves a volumeMount's subPath inside a volume, creating it as
// a directory when missing (as Kubernetes does), and refuses one that
// leaves the volume through "..", or through a symlink.
func SubPath(volPath, sub string) (string, error) {
	if sub == "" {
		return volPath, nil
	}
	if filepath.IsAbs(sub) {
		return "", fmt.Errorf("subPath %q must be relative", sub)
	}
	for _, part := range strings.Split(sub, "/") {
		if part == ".." {
			return "", fmt.Errorf("subPath %q must not contain '..'", sub)
		}
	}
	full := filepath.Join(volPath, sub)
	if _, err := os.Lstat(full); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(full, 0o755); err != nil {
			return "", fmt.Errorf("create subPath %q: %w", sub, err)
		}
	}
	base, err := filepath.EvalSymlinks(volPath)
	if err != nil {
		return "", err
	}
	resolved, err := filepath.EvalSymlinks(full)
	if err != nil {
		return "", fmt.Errorf("subPath %q: %w", sub, err)
	}
	if resolved != base && !strings.HasPrefix(resolved, base+"/") {
		return "", fmt.Errorf("subPath %q resolves to %s, outside the volume", sub, resolved)
	}
	return resolved, nil
}
