package openapi

import (
	"reflect"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// extensionGVK is how kubectl maps a kind to its schema: each definition of
// a kind lists every group-version-kind it is served as.
const extensionGVK = "x-kubernetes-group-version-kind"

// namer names definitions the way Kubernetes does and tags the kinds with
// their group-version-kinds, read from a scheme.
type namer struct {
	gvks map[string][]metav1.GroupVersionKind
}

func newNamer(scheme *runtime.Scheme) *namer {
	n := &namer{gvks: map[string][]metav1.GroupVersionKind{}}
	for gvk, t := range scheme.AllKnownTypes() {
		// Internal versions are the hub's own business, never on the wire.
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		name := util.GetCanonicalTypeName(reflect.New(t).Interface())
		n.gvks[name] = append(n.gvks[name], metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind})
	}
	for _, list := range n.gvks {
		// Map order would otherwise change the document, and with it the ETag,
		// on every start.
		sort.Slice(list, func(i, j int) bool {
			a, b := list[i], list[j]
			if a.Group != b.Group {
				return a.Group < b.Group
			}
			if a.Version != b.Version {
				return a.Version < b.Version
			}
			return a.Kind < b.Kind
		})
	}
	return n
}

// definitionName is kube-openapi's GetDefinitionName hook.
func (n *namer) definitionName(name string) (string, spec.Extensions) {
	friendly := friendlyName(name)
	gvks, ok := n.gvks[name]
	if !ok {
		return friendly, nil
	}
	return friendly, spec.Extensions{extensionGVK: gvks}
}

// friendlyName turns a Go type path such as
// "flotilla.dev/flotilla/api/v1alpha1.GitSource" into the reverse-domain
// form Kubernetes uses ("dev.flotilla.flotilla.api.v1alpha1.GitSource").
// Types that carry an OpenAPI model name ("io.k8s.api.core.v1.Pod") already
// have that form and have no slash.
func friendlyName(name string) string {
	if !strings.Contains(name, "/") {
		return name
	}
	parts := strings.Split(name, "/")
	host := strings.Split(parts[0], ".")
	for i, j := 0, len(host)-1; i < j; i, j = i+1, j-1 {
		host[i], host[j] = host[j], host[i]
	}
	parts[0] = strings.Join(host, ".")
	return strings.Join(parts, ".")
}
