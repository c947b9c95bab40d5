package apiserver

import (
	"net/http"
	"runtime"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"flotilla.dev/flotilla/api"
	fversion "flotilla.dev/flotilla/internal/version"
)

// KubernetesVersion is the Kubernetes API level the hub speaks, reported
// in /version so that clients pick compatible behaviour.
const KubernetesVersion = "v1.37.0"

// serveDiscovery answers /api, /apis, /api/v1, /apis/<g>/<v> and /version.
// The hub answers the legacy (unaggregated) discovery documents, which
// every client falls back to when the aggregated form is not offered.
func (s *Server) serveDiscovery(w http.ResponseWriter, r *http.Request) bool {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/version":
		writeJSON(w, http.StatusOK, versionInfo())
		return true
	case path == "/api":
		writeJSON(w, http.StatusOK, &metav1.APIVersions{
			TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
			Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
				{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host},
			},
		})
		return true
	case path == "/apis":
		list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
		for _, gv := range servedGroupVersions() {
			if gv.Group == "" {
				continue
			}
			list.Groups = append(list.Groups, apiGroup(gv))
		}
		writeJSON(w, http.StatusOK, list)
		return true
	case path == "/api/v1":
		writeJSON(w, http.StatusOK, resourceList(schema.GroupVersion{Version: "v1"}))
		return true
	case strings.HasPrefix(path, "/apis/"):
		parts := strings.Split(strings.TrimPrefix(path, "/apis/"), "/")
		for _, gv := range servedGroupVersions() {
			if gv.Group == "" || parts[0] != gv.Group {
				continue
			}
			if len(parts) == 1 {
				g := apiGroup(gv)
				g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
				writeJSON(w, http.StatusOK, &g)
				return true
			}
			if len(parts) == 2 && parts[1] == gv.Version {
				writeJSON(w, http.StatusOK, resourceList(gv))
				return true
			}
		}
	}
	return false
}

// servedGroupVersions are the stored resources' group-versions, the
// self reviews' and the metrics API's.
func servedGroupVersions() []schema.GroupVersion {
	return append(append(api.GroupVersions(), selfReviewGroups()...), metricsGV)
}

func versionInfo() *version.Info {
	v := strings.TrimPrefix(KubernetesVersion, "v")
	parts := strings.SplitN(v, ".", 3)
	return &version.Info{
		Major:      parts[0],
		Minor:      parts[1],
		GitVersion: KubernetesVersion + "+flotilla-" + strings.TrimPrefix(fversion.Version, "v"),
		GitCommit:  fversion.Commit,
		GoVersion:  runtime.Version(),
		Compiler:   runtime.Compiler,
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
	}
}

func apiGroup(gv schema.GroupVersion) metav1.APIGroup {
	gvd := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
	return metav1.APIGroup{Name: gv.Group, Versions: []metav1.GroupVersionForDiscovery{gvd}, PreferredVersion: gvd}
}

var (
	verbsAll    = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	verbsStatus = metav1.Verbs{"get", "patch", "update"}
)

func resourceList(gv schema.GroupVersion) *metav1.APIResourceList {
	list := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	list.APIResources = append(list.APIResources, selfReviewResources(gv)...)
	if gv == metricsGV {
		list.APIResources = append(list.APIResources, metricsResources()...)
	}
	for _, r := range api.Resources() {
		if r.GVR.GroupVersion() != gv {
			continue
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: r.GVR.Resource, SingularName: r.Singular, Namespaced: r.Namespaced, Kind: r.Kind,
			Verbs: verbsAll, ShortNames: r.ShortNames, Categories: r.Categories,
		})
		if r.HasStatus {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.GVR.Resource + "/status", Namespaced: r.Namespaced, Kind: r.Kind, Verbs: verbsStatus,
			})
		}
		if hasScale(r.Kind) {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.GVR.Resource + "/scale", Namespaced: true, Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: verbsStatus,
			})
		}
		if r.Kind == "Pod" {
			list.APIResources = append(list.APIResources,
				metav1.APIResource{Name: "pods/binding", Namespaced: true, Kind: "Binding", Verbs: metav1.Verbs{"create"}},
				metav1.APIResource{Name: "pods/log", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get"}},
				// As kube-apiserver lists them: GET and POST both open a session.
				metav1.APIResource{Name: "pods/attach", Namespaced: true, Kind: "PodAttachOptions", Verbs: metav1.Verbs{"create", "get"}},
				metav1.APIResource{Name: "pods/exec", Namespaced: true, Kind: "PodExecOptions", Verbs: metav1.Verbs{"create", "get"}},
				metav1.APIResource{Name: "pods/portforward", Namespaced: true, Kind: "PodPortForwardOptions", Verbs: metav1.Verbs{"create", "get"}})
		}
	}
	return list
}
