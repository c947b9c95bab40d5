package apiserver

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"flotilla.dev/flotilla/api"
)

// requestInfo is what a REST path and method say about a request.
type requestInfo struct {
	// Verb in Kubernetes' words: get, list, watch, create, update, patch,
	// delete, deletecollection.
	Verb        string
	Resource    *api.Resource
	Namespace   string
	Name        string
	Subresource string
}

// parseRequest maps a resource path to a served resource. ok is false for
// paths that are not resource requests (discovery, health, ...); err is a
// StatusError for resource paths that are malformed or not served.
func parseRequest(r *http.Request) (ri requestInfo, ok bool, err error) {
	if IsSelfReviewPath(r.URL.Path) {
		// Created, never stored: served beside discovery.
		return ri, false, nil
	}
	if _, ok, _ := metricsRequest(r); ok {
		// Computed from the devices' reports (usage.go).
		return ri, false, nil
	}
	p := strings.Trim(r.URL.Path, "/")
	parts := strings.Split(p, "/")
	var gv schema.GroupVersion
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		gv = schema.GroupVersion{Version: parts[1]}
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gv = schema.GroupVersion{Group: parts[1], Version: parts[2]}
		parts = parts[3:]
	default:
		return ri, false, nil
	}
	// Legacy watch paths: /api/v1/watch/namespaces/x/pods.
	legacyWatch := false
	if parts[0] == "watch" {
		legacyWatch = true
		parts = parts[1:]
		if len(parts) == 0 {
			return ri, true, notFoundPath(r)
		}
	}
	if len(parts) >= 3 && parts[0] == "namespaces" && parts[2] != "status" && parts[2] != "finalize" {
		ri.Namespace = parts[1]
		parts = parts[2:]
	}
	res, found := api.ResourceFor(gv.WithResource(parts[0]))
	if !found {
		return ri, true, notFoundPath(r)
	}
	ri.Resource = res
	if len(parts) >= 2 {
		ri.Name = parts[1]
	}
	if len(parts) >= 3 {
		ri.Subresource = parts[2]
	}
	if len(parts) > 3 || (ri.Namespace != "" && !res.Namespaced) {
		return ri, true, notFoundPath(r)
	}
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case ri.Name == "" && (legacyWatch || isTrue(q.Get("watch"))):
			ri.Verb = "watch"
		case ri.Name == "":
			ri.Verb = "list"
		case legacyWatch || isTrue(q.Get("watch")):
			// A watch of one object is a filtered watch of the collection.
			ri.Verb = "watch"
		default:
			ri.Verb = "get"
		}
	case http.MethodPost:
		ri.Verb = "create"
	case http.MethodPut:
		ri.Verb = "update"
	case http.MethodPatch:
		ri.Verb = "patch"
	case http.MethodDelete:
		if ri.Name == "" {
			ri.Verb = "deletecollection"
		} else {
			ri.Verb = "delete"
		}
	default:
		return ri, true, methodNotAllowed(res, r.Method)
	}
	return ri, true, nil
}

func isTrue(s string) bool { return s == "true" || s == "1" }
