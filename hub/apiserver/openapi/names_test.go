package openapi

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"flotilla.dev/flotilla/api"
)

func TestFriendlyName(t *testing.T) {
	for in, want := range map[string]string{
		"flotilla.dev/flotilla/api/v1alpha1.GitSource": "dev.flotilla.flotilla.api.v1alpha1.GitSource",
		"k8s.io/api/core/v1.Pod":                       "io.k8s.api.core.v1.Pod",
		"io.k8s.api.core.v1.Pod":                       "io.k8s.api.core.v1.Pod",
		"example/pkg.Type":                             "example.pkg.Type",
	} {
		if got := friendlyName(in); got != want {
			t.Errorf("friendlyName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDefinitionNameCarriesGroupVersionKinds(t *testing.T) {
	n := newNamer(api.Scheme)

	name, ext := n.definitionName("io.k8s.api.apps.v1.Deployment")
	if name != "io.k8s.api.apps.v1.Deployment" {
		t.Errorf("name = %q", name)
	}
	want := []metav1.GroupVersionKind{{Group: "apps", Version: "v1", Kind: "Deployment"}}
	if got := ext[extensionGVK]; !reflect.DeepEqual(got, want) {
		t.Errorf("Deployment %s = %v, want %v", extensionGVK, got, want)
	}

	name, ext = n.definitionName("flotilla.dev/flotilla/api/v1alpha1.GitSource")
	if name != "dev.flotilla.flotilla.api.v1alpha1.GitSource" {
		t.Errorf("name = %q", name)
	}
	want = []metav1.GroupVersionKind{{Group: "flotilla.dev", Version: "v1alpha1", Kind: "GitSource"}}
	if got := ext[extensionGVK]; !reflect.DeepEqual(got, want) {
		t.Errorf("GitSource %s = %v, want %v", extensionGVK, got, want)
	}

	// DeleteOptions is served in every group-version, so kubectl must find
	// it under each; the order is fixed so the document (and its ETag) is
	// the same on every start.
	_, ext = n.definitionName("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions")
	gvks, _ := ext[extensionGVK].([]metav1.GroupVersionKind)
	for _, gv := range api.GroupVersions() {
		found := false
		for _, g := range gvks {
			found = found || (g == metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: "DeleteOptions"})
		}
		if !found {
			t.Errorf("DeleteOptions lacks %s in %v", gv, gvks)
		}
	}
	for i := 1; i < len(gvks); i++ {
		if gvks[i-1].Group > gvks[i].Group {
			t.Errorf("DeleteOptions group-version-kinds not sorted: %v", gvks)
		}
	}

	// A type the scheme does not know is not a kind and gets no extension.
	if _, ext := n.definitionName("io.k8s.api.core.v1.PodSpec"); ext != nil {
		t.Errorf("PodSpec has extensions %v, want none", ext)
	}
}

func TestOperationNaming(t *testing.T) {
	for _, tc := range []struct {
		gv       schema.GroupVersion
		opGV     string
		tag      string
		rootPath string
	}{
		{schema.GroupVersion{Version: "v1"}, "CoreV1", "core_v1", "api/v1"},
		{schema.GroupVersion{Group: "apps", Version: "v1"}, "AppsV1", "apps_v1", "apis/apps/v1"},
		{schema.GroupVersion{Group: "coordination.k8s.io", Version: "v1"}, "CoordinationV1", "coordination_v1", "apis/coordination.k8s.io/v1"},
		{schema.GroupVersion{Group: "flotilla.dev", Version: "v1alpha1"}, "FlotillaDevV1alpha1", "flotillaDev_v1alpha1", "apis/flotilla.dev/v1alpha1"},
	} {
		if got := operationGroupVersion(tc.gv); got != tc.opGV {
			t.Errorf("operationGroupVersion(%v) = %q, want %q", tc.gv, got, tc.opGV)
		}
		if got := tagFor(tc.gv); got != tc.tag {
			t.Errorf("tagFor(%v) = %q, want %q", tc.gv, got, tc.tag)
		}
		if got := gvPath(tc.gv); got != tc.rootPath {
			t.Errorf("gvPath(%v) = %q, want %q", tc.gv, got, tc.rootPath)
		}
	}
}
