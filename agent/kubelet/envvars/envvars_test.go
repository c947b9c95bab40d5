package envvars

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type fakeObjects struct {
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
	err     error
}

func (f *fakeObjects) ConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	if f.err != nil {
		return nil, f.err
	}
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

func objects() *fakeObjects {
	return &fakeObjects{
		cms: map[string]*corev1.ConfigMap{
			"ns/cfg": {Data: map[string]string{"color": "blue", "size": "L", "bad=key": "x"}},
		},
		secrets: map[string]*corev1.Secret{
			"ns/creds": {Data: map[string][]byte{"password": []byte("s3cret"), "user": []byte("admin")}},
		},
	}
}

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", UID: "uid-1",
			Labels: map[string]string{"app": "web", "tier": "front"}, Annotations: map[string]string{"note": "hi"}},
		Spec: corev1.PodSpec{NodeName: "dev-1", ServiceAccountName: "robot",
			Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			}}, {Name: "side"}}},
	}
}

func optional() *bool { b := true; return &b }

func TestEnvEverySource(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.EnvFrom = []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
		{Prefix: "DB_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: optional()}},
	}
	c.Env = []corev1.EnvVar{
		{Name: "color", Value: "red"}, // overrides envFrom
		{Name: "GREETING", Value: "hello $(POD_NAME) in $(color), $$(POD_NAME) $(UNDEFINED)"},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "LATE", Value: "$(POD_NAME)"},
		{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
		{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
		{Name: "NOTE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['note']"}}},
		{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "SA", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.serviceAccountName"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "POD_IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
		{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
		{Name: "MEM_LIMIT_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		{Name: "CPU_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		{Name: "CPU_REQ_M", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
		{Name: "SIDE_MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "side", Resource: "limits.memory"}}},
		{Name: "SIZE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "size"}}},
		{Name: "PASS", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
		{Name: "MAYBE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "nope", Optional: optional()}}},
		{Name: "MAYBE2", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "k", Optional: optional()}}},
	}
	info := PodInfo{PodIPs: []string{"10.42.0.5", "fd00::5"}, HostIPs: []string{"192.168.1.10"},
		NodeAllocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3500m"), corev1.ResourceMemory: resource.MustParse("2Gi")}}
	res, err := Env(context.Background(), objects(), pod, c, info)
	if err != nil {
		t.Fatal(err)
	}
	got := res.Map()
	want := map[string]string{
		"color": "red", "size": "L", "DB_password": "s3cret", "DB_user": "admin",
		"GREETING": "hello $(POD_NAME) in red, $(POD_NAME) $(UNDEFINED)",
		"POD_NAME": "web-1", "LATE": "web-1", "NS": "ns", "UID": "uid-1", "APP": "web", "NOTE": "hi",
		"NODE": "dev-1", "SA": "robot", "POD_IP": "10.42.0.5", "POD_IPS": "10.42.0.5,fd00::5", "HOST_IP": "192.168.1.10",
		"MEM_LIMIT_MI": "64", "CPU_LIMIT": "4", "CPU_REQ_M": "250", "SIDE_MEM": "2147483648",
		"SIZE": "L", "PASS": "s3cret",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("env =\n%v\nwant\n%v", got, want)
	}
	if !reflect.DeepEqual(res.Skipped, []string{"bad=key"}) {
		t.Errorf("skipped = %v", res.Skipped)
	}
	for i := 1; i < len(res.Env); i++ {
		if res.Env[i-1].Name >= res.Env[i].Name {
			t.Fatalf("env not sorted: %v", res.Env)
		}
	}
	if s := res.Strings(); len(s) != len(res.Env) || !strings.Contains(strings.Join(s, "\n"), "PASS=s3cret") {
		t.Errorf("strings = %v", s)
	}
}

func TestEnvErrorsCarryKubernetesMessages(t *testing.T) {
	ref := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}}
	}
	sref := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}}
	}
	cases := []struct {
		env     []corev1.EnvVar
		envFrom []corev1.EnvFromSource
		want    string
	}{
		{env: []corev1.EnvVar{ref("cfg", "missing")}, want: "couldn't find key missing in ConfigMap ns/cfg"},
		{env: []corev1.EnvVar{ref("nope", "k")}, want: `configmap "nope" not found`},
		{env: []corev1.EnvVar{sref("creds", "token")}, want: "couldn't find key token in Secret ns/creds"},
		{env: []corev1.EnvVar{sref("nope", "k")}, want: `secret "nope" not found`},
		{envFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}}, want: `secret "gone" not found`},
		{envFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}}, want: `configmap "gone" not found`},
		{env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.bogus"}}}}, want: `unsupported fieldRef fieldPath "spec.bogus"`},
		{env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "ghost", Resource: "limits.cpu"}}}}, want: `container "ghost" not found`},
	}
	for _, tc := range cases {
		pod := testPod()
		c := &pod.Spec.Containers[0]
		c.Env, c.EnvFrom = tc.env, tc.envFrom
		_, err := Env(context.Background(), objects(), pod, c, PodInfo{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}

	// A hub that cannot be reached is an error too, wrapped for errors.Is.
	boom := errors.New("connection refused")
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.Env = []corev1.EnvVar{ref("cfg", "color")}
	if _, err := Env(context.Background(), &fakeObjects{err: boom}, pod, c, PodInfo{}); !errors.Is(err, boom) {
		t.Errorf("err = %v, want it to wrap %v", err, boom)
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two", "EMPTY": ""}
	for in, want := range map[string]string{
		"":                "",
		"plain":           "plain",
		"$(A)":            "1",
		"x$(A)y$(B)z":     "x1ytwoz",
		"$(C)":            "$(C)",
		"$$(A)":           "$(A)",
		"$$$(A)":          "$1",
		"$":               "$",
		"a$":              "a$",
		"$A":              "$A",
		"$(A":             "$(A",
		"$()":             "$()",
		"$(EMPTY)|":       "|",
		"100$ and $(B)$$": "100$ and two$",
	} {
		if got := Expand(in, vars); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestArgv(t *testing.T) {
	env := map[string]string{"PORT": "8080"}
	ep, cmd := []string{"/entry", "--flag"}, []string{"serve", "--verbose"}
	cases := []struct {
		command, args []string
		want          []string
	}{
		{nil, nil, []string{"/entry", "--flag", "serve", "--verbose"}},
		{[]string{"/bin/other"}, nil, []string{"/bin/other"}},
		{[]string{"/bin/other"}, []string{"--port=$(PORT)"}, []string{"/bin/other", "--port=8080"}},
		{nil, []string{"run", "$(PORT)", "$$(PORT)"}, []string{"/entry", "--flag", "run", "8080", "$(PORT)"}},
	}
	for _, tc := range cases {
		c := &corev1.Container{Command: tc.command, Args: tc.args}
		if got := Argv(c, ep, cmd, env); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("command %q args %q: argv = %q, want %q", tc.command, tc.args, got, tc.want)
		}
	}
	if got := Argv(&corev1.Container{}, nil, nil, env); len(got) != 0 {
		t.Errorf("empty image and spec: %q", got)
	}
}

func TestFieldValueMaps(t *testing.T) {
	pod := testPod()
	v, err := FieldValue(pod, &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}, PodInfo{})
	if err != nil || v != "app=\"web\"\ntier=\"front\"" {
		t.Fatalf("labels = %q, %v", v, err)
	}
	if _, err := FieldValue(pod, &corev1.ObjectFieldSelector{APIVersion: "v2", FieldPath: "metadata.name"}, PodInfo{}); err == nil {
		t.Fatal("apiVersion v2 accepted")
	}
}
