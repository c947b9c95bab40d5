package envvars

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Objects reads the ConfigMaps and Secrets a pod refers to. A missing
// object is an error for which apierrors.IsNotFound is true.
type Objects interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// PodInfo is what the downward API needs beyond the pod object.
type PodInfo struct {
	PodIPs  []string
	HostIPs []string
	// NodeAllocatable stands in for a container's limits when it sets none,
	// as Kubernetes does for resourceFieldRef.
	NodeAllocatable corev1.ResourceList
}

// Result is a container's environment.
type Result struct {
	// Env is sorted by name; later definitions have replaced earlier ones.
	Env []corev1.EnvVar
	// Skipped are envFrom keys that cannot be variable names (they
	// contain '='); the kubelet reports them in an Event, as Kubernetes does.
	Skipped []string
}

// Strings returns the environment as "NAME=value" entries.
func (r Result) Strings() []string {
	out := make([]string, len(r.Env))
	for i, e := range r.Env {
		out[i] = e.Name + "=" + e.Value
	}
	return out
}

// Map returns the environment as a map, for $(VAR) expansion.
func (r Result) Map() map[string]string {
	m := make(map[string]string, len(r.Env))
	for _, e := range r.Env {
		m[e.Name] = e.Value
	}
	return m
}

// Env computes container c's environment: envFrom first, in order, then
// env in order, each entry able to refer to the ones before it with
// $(NAME). Any error means the container cannot be configured yet
// (CreateContainerConfigError); its message is Kubernetes'.
func Env(ctx context.Context, objs Objects, pod *corev1.Pod, c *corev1.Container, info PodInfo) (Result, error) {
	vars := map[string]string{}
	var res Result
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			ref := from.ConfigMapRef
			cm, err := objs.ConfigMap(ctx, pod.Namespace, ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) {
					if isTrue(ref.Optional) {
						continue
					}
					return Result{}, fmt.Errorf("configmap %q not found", ref.Name)
				}
				return Result{}, fmt.Errorf("get configmap %s/%s: %w", pod.Namespace, ref.Name, err)
			}
			res.Skipped = append(res.Skipped, addAll(vars, from.Prefix, cm.Data)...)
		case from.SecretRef != nil:
			ref := from.SecretRef
			s, err := objs.Secret(ctx, pod.Namespace, ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) {
					if isTrue(ref.Optional) {
						continue
					}
					return Result{}, fmt.Errorf("secret %q not found", ref.Name)
				}
				return Result{}, fmt.Errorf("get secret %s/%s: %w", pod.Namespace, ref.Name, err)
			}
			data := make(map[string]string, len(s.Data)+len(s.StringData))
			for k, v := range s.Data {
				data[k] = string(v)
			}
			res.Skipped = append(res.Skipped, addAll(vars, from.Prefix, data)...)
		}
	}

	for _, e := range c.Env {
		if e.ValueFrom == nil {
			vars[e.Name] = Expand(e.Value, vars)
			continue
		}
		v, ok, err := valueFrom(ctx, objs, pod, c, e.ValueFrom, info)
		if err != nil {
			return Result{}, err
		}
		if ok {
			vars[e.Name] = v
		}
	}

	res.Env = make([]corev1.EnvVar, 0, len(vars))
	for k, v := range vars {
		res.Env = append(res.Env, corev1.EnvVar{Name: k, Value: v})
	}
	sort.Slice(res.Env, func(i, j int) bool { return res.Env[i].Name < res.Env[j].Name })
	sort.Strings(res.Skipped)
	return res, nil
}

// addAll adds prefixed keys and returns the ones that cannot be names.
func addAll(vars map[string]string, prefix string, data map[string]string) []string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var skipped []string
	for _, k := range keys {
		name := prefix + k
		if !validName(name) {
			skipped = append(skipped, name)
			continue
		}
		vars[name] = data[k]
	}
	return skipped
}

// validName is Kubernetes' relaxed rule for environment variable names:
// printable ASCII without '='.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < ' ' || r > '~' || r == '=' {
			return false
		}
	}
	return true
}

func isTrue(b *bool) bool { return b != nil && *b }

func valueFrom(ctx context.Context, objs Objects, pod *corev1.Pod, c *corev1.Container, src *corev1.EnvVarSource, info PodInfo) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := FieldValue(pod, src.FieldRef, info)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		v, err := ResourceValue(pod, c, src.ResourceFieldRef, info.NodeAllocatable)
		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := objs.ConfigMap(ctx, pod.Namespace, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) {
				if isTrue(ref.Optional) {
					return "", false, nil
				}
				return "", false, fmt.Errorf("configmap %q not found", ref.Name)
			}
			return "", false, fmt.Errorf("get configmap %s/%s: %w", pod.Namespace, ref.Name, err)
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if isTrue(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return v, true, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := objs.Secret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) {
				if isTrue(ref.Optional) {
					return "", false, nil
				}
				return "", false, fmt.Errorf("secret %q not found", ref.Name)
			}
			return "", false, fmt.Errorf("get secret %s/%s: %w", pod.Namespace, ref.Name, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if sv, sok := s.StringData[ref.Key]; sok {
				return sv, true, nil
			}
			if isTrue(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), true, nil
	case src.FileKeyRef != nil:
		return "", false, fmt.Errorf("env from fileKeyRef (volume %q, path %q) is not supported by flotilla; use a ConfigMap or Secret key", src.FileKeyRef.VolumeName, src.FileKeyRef.Path)
	}
	return "", false, fmt.Errorf("env var source has no reference set")
}

// FieldValue resolves a downward API fieldRef. metadata.labels and
// metadata.annotations (whole maps) are only valid in volumes, where they
// are rendered as sorted key="value" lines.
func FieldValue(pod *corev1.Pod, ref *corev1.ObjectFieldSelector, info PodInfo) (string, error) {
	if ref.APIVersion != "" && ref.APIVersion != "v1" {
		return "", fmt.Errorf("unsupported fieldRef apiVersion %q (want v1)", ref.APIVersion)
	}
	path := ref.FieldPath
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return first(info.PodIPs), nil
	case "status.podIPs":
		return strings.Join(info.PodIPs, ","), nil
	case "status.hostIP":
		return first(info.HostIPs), nil
	case "status.hostIPs":
		return strings.Join(info.HostIPs, ","), nil
	}
	return "", fmt.Errorf("unsupported fieldRef fieldPath %q", path)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// subscript parses "prefix['key']".
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	key, ok := strings.CutSuffix(rest, "']")
	return key, ok
}

// formatMap renders a map as Kubernetes' downward API volumes do.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return b.String()
}

// ResourceValue resolves a resourceFieldRef against container c, or the
// container it names. A limit that is not set is the node's allocatable.
func ResourceValue(pod *corev1.Pod, c *corev1.Container, ref *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	target := c
	if ref.ContainerName != "" && (c == nil || ref.ContainerName != c.Name) {
		target = nil
		for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
			for i := range list {
				if list[i].Name == ref.ContainerName {
					target = &list[i]
				}
			}
		}
		if target == nil {
			return "", fmt.Errorf("resourceFieldRef: container %q not found in the pod", ref.ContainerName)
		}
	}
	if target == nil {
		return "", fmt.Errorf("resourceFieldRef %q needs a containerName", ref.Resource)
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported resourceFieldRef resource %q", ref.Resource)
	}
	rn := corev1.ResourceName(name)
	var q resource.Quantity
	if kind == "limits" {
		v, ok := target.Resources.Limits[rn]
		if !ok {
			v = allocatable[rn]
		}
		q = v
	} else {
		q = target.Resources.Requests[rn]
	}
	divisor := ref.Divisor
	switch rn {
	case corev1.ResourceCPU:
		if divisor.IsZero() {
			divisor = resource.MustParse("1")
		}
		return fmt.Sprint(int64(math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue())))), nil
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		if divisor.IsZero() {
			divisor = resource.MustParse("1")
		}
		return fmt.Sprint(int64(math.Ceil(float64(q.Value()) / float64(divisor.Value())))), nil
	}
	if strings.HasPrefix(name, "hugepages-") {
		if divisor.IsZero() {
			divisor = resource.MustParse("1")
		}
		return fmt.Sprint(int64(math.Ceil(float64(q.Value()) / float64(divisor.Value())))), nil
	}
	return "", fmt.Errorf("unsupported resourceFieldRef resource %q", ref.Resource)
}
