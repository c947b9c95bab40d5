package output

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// samples holds one object of every served kind, as a typed client
// returns it: empty TypeMeta.
func samples(t *testing.T) []runtime.Object {
	var out []runtime.Object
	for _, r := range api.Resources() {
		obj := r.New()
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		m.SetName("sample-" + r.Singular)
		if r.Namespaced {
			m.SetNamespace("default")
		}
		m.SetLabels(map[string]string{"app": "demo"})
		m.SetCreationTimestamp(metav1.NewTime(now.Add(-time.Hour)))
		m.SetResourceVersion("7")
		if s, ok := obj.(*corev1.Secret); ok {
			s.Data = map[string][]byte{"token": []byte("s3cr3t")}
		}
		out = append(out, obj)
	}
	return out
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./ctl/output -update creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./ctl/output -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestGoldenEveryKindEveryFormat(t *testing.T) {
	for _, spec := range []string{"", "wide", "yaml", "json", "name", "jsonpath={.kind}/{.metadata.name}{\"\\n\"}"} {
		f, err := Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		for _, obj := range samples(t) {
			if err := f.Print(&buf, obj, TableOptions{Now: now}); err != nil {
				t.Fatalf("-o %s: %v", spec, err)
			}
			if f.IsTable() {
				buf.WriteString("\n")
			}
		}
		name := f.Kind
		if name == "" {
			name = "table"
		}
		golden(t, name, buf.Bytes())
	}
}

func TestListsPrintAsKubectlList(t *testing.T) {
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}, Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}}
	for spec, want := range map[string]string{
		"jsonpath={.kind} {.metadata.resourceVersion} {.items[*].kind} {.items[*].metadata.name}": "List 9 Pod Pod a b",
		"name": "pod/a\npod/b\n",
	} {
		f, err := Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := f.Print(&buf, list, TableOptions{}); err != nil {
			t.Fatal(err)
		}
		if buf.String() != want {
			t.Errorf("-o %s: %q, want %q", spec, buf.String(), want)
		}
	}
}

func TestParseRejectsBadFormats(t *testing.T) {
	for _, bad := range []string{"xml", "jsonpath=", "jsonpath={.items[", "custom-columns=NAME:.metadata.name"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("-o %s accepted", bad)
		}
	}
	f, _ := Parse("jsonpath={.spec.missing}")
	var buf bytes.Buffer
	if err := f.Print(&buf, &corev1.Pod{}, TableOptions{}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing key: %v", err)
	}
}

func TestKindGroup(t *testing.T) {
	for _, r := range api.Resources() {
		got := KindGroup(r.GVK())
		want := strings.ToLower(r.Kind)
		if r.GVR.Group != "" {
			want += "." + r.GVR.Group
		}
		if got != want {
			t.Errorf("%s: %q", r.Kind, got)
		}
	}
}

// TestManagedFieldsOmittedUnlessAsked: like kubectl, YAML, JSON and
// JSONPath leave managedFields out, of objects and of list items, unless
// ShowManagedFields.
func TestManagedFieldsOmittedUnlessAsked(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}}}
	list := &corev1.ConfigMapList{Items: []corev1.ConfigMap{*cm}}
	for _, kind := range []string{"yaml", "json", "jsonpath={..manager}"} {
		for _, obj := range []runtime.Object{cm.DeepCopy(), list.DeepCopy()} {
			f, err := Parse(kind)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			// JSONPath says so when what it asks for is not there.
			if err := f.Print(&buf, obj, TableOptions{}); err != nil && !strings.Contains(err.Error(), "manager is not found") {
				t.Fatal(err)
			}
			if strings.Contains(buf.String(), "kubectl") {
				t.Errorf("-o %s of a %T shows managedFields:\n%s", kind, obj, buf.String())
			}
			buf.Reset()
			f.ShowManagedFields = true
			if err := f.Print(&buf, obj, TableOptions{}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), "kubectl") {
				t.Errorf("-o %s --show-managed-fields of a %T lost them:\n%s", kind, obj, buf.String())
			}
		}
	}
}
