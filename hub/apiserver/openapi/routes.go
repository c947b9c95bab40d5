package openapi

import (
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/common"

	"flotilla.dev/flotilla/api"
)

// Extensions kubectl and client generators read from each operation.
const (
	extensionAction = "x-kubernetes-action"
)

// Content types the hub reads and writes.
const (
	mimeJSON           = "application/json"
	mimeJSONWatch      = "application/json;stream=watch"
	mimeJSONPatch      = "application/json-patch+json"
	mimeMergePatch     = "application/merge-patch+json"
	mimeStrategicPatch = "application/strategic-merge-patch+json"
)

// param is one request parameter; it satisfies kube-openapi's
// common.Parameter so the library's builders turn it into v2 and v3 form.
type param struct {
	name     string
	desc     string
	kind     common.ParameterKind
	dataType string
	required bool
}

func (p param) Name() string               { return p.name }
func (p param) Description() string        { return p.desc }
func (p param) Required() bool             { return p.required }
func (p param) Kind() common.ParameterKind { return p.kind }
func (p param) DataType() string           { return p.dataType }
func (p param) AllowMultiple() bool        { return false }

var _ common.Parameter = param{}

func query(name, dataType, desc string) param {
	return param{name: name, desc: desc, kind: common.QueryParameterKind, dataType: dataType}
}

var (
	paramNamespace = param{name: "namespace", kind: common.PathParameterKind, dataType: "string", required: true,
		desc: "namespace of the objects"}
	paramName = param{name: "name", kind: common.PathParameterKind, dataType: "string", required: true,
		desc: "name of the object"}

	paramDryRun = query("dryRun", "string",
		"When present (the only value is \"All\"), the request is validated and admitted but nothing is stored.")
	paramFieldManager = query("fieldManager", "string",
		"Name of the actor making the change, recorded in managedFields.")
	paramFieldValidation = query("fieldValidation", "string",
		"What the server does with unknown or duplicate fields in the body: \"Ignore\" drops them, "+
			"\"Warn\" drops them and answers with a Warning header for each, "+
			"\"Strict\" refuses the request with 400 Bad Request.")
	paramGracePeriod = query("gracePeriodSeconds", "integer",
		"Seconds the object may take to terminate before it is removed; 0 removes it at once. "+
			"Unset means the kind's default.")
	paramPropagation = query("propagationPolicy", "string",
		"How dependents are handled: \"Orphan\", \"Background\" or \"Foreground\".")

	paramLabelSelector = query("labelSelector", "string",
		"Only objects whose labels match this selector (for example app=web,tier!=cache).")
	paramFieldSelector = query("fieldSelector", "string",
		"Only objects whose fields match this selector (for example spec.nodeName=edge-1).")
	paramResourceVersion = query("resourceVersion", "string",
		"For a list, the revision to read at; for a watch, the revision to start after. "+
			"A revision older than the watch history is answered with 410 Gone.")
	paramWatch = query("watch", "boolean",
		"Stream changes (ADDED, MODIFIED, DELETED, BOOKMARK events) instead of returning a list.")
	paramTimeoutSeconds = query("timeoutSeconds", "integer",
		"End a list or watch call after this many seconds.")
	paramAllowWatchBookmarks = query("allowWatchBookmarks", "boolean",
		"Let the server send BOOKMARK events that carry only a newer resourceVersion.")
	paramLimit = query("limit", "integer",
		"Return at most this many objects, and a continue token when more remain.")
	paramContinue = query("continue", "string",
		"The continue token of the previous page, to fetch the next one.")
	paramSendInitialEvents = query("sendInitialEvents", "boolean",
		"With watch=true and allowWatchBookmarks=true: start the watch with an ADDED event for every "+
			"existing object, then a BOOKMARK annotated k8s.io/initial-events-end.")

	paramBody = param{name: "body", kind: common.BodyParameterKind, required: true}
	// The body of a DELETE (DeleteOptions) may be left out.
	paramDeleteBody = param{name: "body", kind: common.BodyParameterKind}
)

var (
	listParams = []param{paramLabelSelector, paramFieldSelector, paramResourceVersion, paramWatch, paramTimeoutSeconds,
		paramAllowWatchBookmarks, paramSendInitialEvents, paramLimit, paramContinue}
	// The legacy /watch/ paths always watch.
	watchParams    = []param{paramLabelSelector, paramFieldSelector, paramResourceVersion, paramTimeoutSeconds, paramAllowWatchBookmarks, paramSendInitialEvents}
	writeParams    = []param{paramDryRun, paramFieldManager, paramFieldValidation}
	deleteParams   = []param{paramDryRun, paramGracePeriod, paramPropagation}
	selectorParams = []param{paramLabelSelector, paramFieldSelector}
)

// response is one status code of an operation and the type of its body.
type response struct {
	code  int
	model any
}

func (r response) Code() int { return r.code }
func (r response) Message() string {
	return http.StatusText(r.code)
}
func (r response) Model() any { return r.model }

var _ common.StatusCodeResponse = response{}

// route is one operation on one path, in kube-openapi's common.Route form.
type route struct {
	method    string
	path      string
	opID      string
	tag       string
	desc      string
	params    []param
	consumes  []string
	produces  []string
	action    string
	gvk       schema.GroupVersionKind
	body      any
	responses []response
}

func (r *route) Method() string        { return r.method }
func (r *route) Path() string          { return r.path }
func (r *route) OperationName() string { return r.opID }
func (r *route) Description() string   { return r.desc }
func (r *route) Consumes() []string    { return r.consumes }
func (r *route) Produces() []string    { return r.produces }
func (r *route) Parameters() []common.Parameter {
	out := make([]common.Parameter, len(r.params))
	for i, p := range r.params {
		out[i] = p
	}
	return out
}

func (r *route) Metadata() map[string]any {
	return map[string]any{
		extensionAction: r.action,
		extensionGVK:    metav1.GroupVersionKind{Group: r.gvk.Group, Version: r.gvk.Version, Kind: r.gvk.Kind},
	}
}
func (r *route) RequestPayloadSample() any  { return r.body }
func (r *route) ResponsePayloadSample() any { return nil }
func (r *route) StatusCodeResponses() []common.StatusCodeResponse {
	out := make([]common.StatusCodeResponse, len(r.responses))
	for i, resp := range r.responses {
		out[i] = resp
	}
	return out
}

var _ common.Route = (*route)(nil)

// container holds the routes of one group-version, rooted at its prefix.
type container struct {
	root   string
	routes []common.Route
}

func (c *container) RootPath() string                   { return c.root }
func (c *container) PathParameters() []common.Parameter { return nil }
func (c *container) Routes() []common.Route             { return c.routes }

var _ common.RouteContainer = (*container)(nil)

// gvPath is the REST prefix of a group-version without the leading slash,
// which is also its key in the /openapi/v3 index: "api/v1",
// "apis/apps/v1".
func gvPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// containers groups the routes of the resources by group-version, in the
// order the group-versions first appear.
func containers(resources []*api.Resource) []*container {
	var out []*container
	byGV := map[schema.GroupVersion]*container{}
	for _, r := range resources {
		gv := r.GVR.GroupVersion()
		c, ok := byGV[gv]
		if !ok {
			c = &container{root: "/" + gvPath(gv)}
			byGV[gv] = c
			out = append(out, c)
		}
		for _, rt := range routesFor(r) {
			c.routes = append(c.routes, rt)
		}
	}
	return out
}

// routesFor lists the operations the apiserver serves for one resource.
func routesFor(r *api.Resource) []*route {
	gv := r.GVR.GroupVersion()
	gvk := r.GVK()
	root := "/" + gvPath(gv)
	opGV := operationGroupVersion(gv)
	tag := tagFor(gv)
	kind := r.Kind

	scope, collection, watchCollection := "", root+"/"+r.GVR.Resource, root+"/watch/"+r.GVR.Resource
	var scopeParams []param
	if r.Namespaced {
		scope = "Namespaced"
		collection = root + "/namespaces/{namespace}/" + r.GVR.Resource
		watchCollection = root + "/watch/namespaces/{namespace}/" + r.GVR.Resource
		scopeParams = []param{paramNamespace}
	}
	item := collection + "/{name}"
	itemParams := append(append([]param(nil), scopeParams...), paramName)
	obj, list := r.New(), r.NewList()
	event := &metav1.WatchEvent{}

	mk := func(method, path, verb, suffix, action, desc string, params []param) *route {
		return &route{
			method: method, path: path,
			opID:     verb + opGV + scope + kind + suffix,
			tag:      tag,
			desc:     desc,
			params:   params,
			action:   action,
			gvk:      gvk,
			produces: []string{mimeJSON},
		}
	}
	join := func(lists ...[]param) []param {
		var out []param
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}

	var out []*route

	listRoute := mk(http.MethodGet, collection, "list", "", "list", "list or watch objects of kind "+kind, join(scopeParams, listParams))
	listRoute.produces = []string{mimeJSON, mimeJSONWatch}
	listRoute.responses = []response{{http.StatusOK, list}}
	out = append(out, listRoute)

	if r.Namespaced {
		all := mk(http.MethodGet, root+"/"+r.GVR.Resource, "list", "", "list", "list or watch objects of kind "+kind+" in every namespace", listParams)
		all.opID = "list" + opGV + kind + "ForAllNamespaces"
		all.produces = []string{mimeJSON, mimeJSONWatch}
		all.responses = []response{{http.StatusOK, list}}
		out = append(out, all)
	}

	// The /watch/ paths predate ?watch=true; older clients still use them.
	watchList := mk(http.MethodGet, watchCollection, "watch", "List", "watchlist", "watch changes to objects of kind "+kind, join(scopeParams, watchParams))
	watchList.produces = []string{mimeJSON, mimeJSONWatch}
	watchList.responses = []response{{http.StatusOK, event}}
	out = append(out, watchList)
	watchOne := mk(http.MethodGet, watchCollection+"/{name}", "watch", "", "watch", "watch changes to an object of kind "+kind, join(itemParams, watchParams))
	watchOne.produces = []string{mimeJSON, mimeJSONWatch}
	watchOne.responses = []response{{http.StatusOK, event}}
	out = append(out, watchOne)
	if r.Namespaced {
		all := mk(http.MethodGet, root+"/watch/"+r.GVR.Resource, "watch", "", "watchlist", "watch changes to objects of kind "+kind+" in every namespace", watchParams)
		all.opID = "watch" + opGV + kind + "ListForAllNamespaces"
		all.produces = []string{mimeJSON, mimeJSONWatch}
		all.responses = []response{{http.StatusOK, event}}
		out = append(out, all)
	}

	create := mk(http.MethodPost, collection, "create", "", "post", "create a "+kind, join(scopeParams, writeParams, []param{paramBody}))
	create.consumes = []string{mimeJSON}
	create.body = obj
	create.responses = []response{{http.StatusOK, obj}, {http.StatusCreated, obj}, {http.StatusAccepted, obj}}
	out = append(out, create)

	out = append(out, itemRoutes(mk, item, "", "the specified "+kind, itemParams, obj, join)...)

	// A delete answers with the object while it terminates (deletionTimestamp
	// set, finalizers pending) or as it was removed.
	del := mk(http.MethodDelete, item, "delete", "", "delete", "delete a "+kind, join(itemParams, deleteParams, []param{paramDeleteBody}))
	del.consumes = []string{mimeJSON}
	del.body = &metav1.DeleteOptions{}
	del.responses = []response{{http.StatusOK, obj}, {http.StatusAccepted, obj}}
	out = append(out, del)

	delAll := mk(http.MethodDelete, collection, "delete", "", "deletecollection", "delete a collection of "+kind, join(scopeParams, selectorParams, deleteParams, []param{paramDeleteBody}))
	delAll.opID = "delete" + opGV + "Collection" + scope + kind
	delAll.consumes = []string{mimeJSON}
	delAll.body = &metav1.DeleteOptions{}
	delAll.responses = []response{{http.StatusOK, list}}
	out = append(out, delAll)

	if r.HasStatus {
		out = append(out, itemRoutes(mk, item+"/status", "Status", "status of the specified "+kind, itemParams, obj, join)...)
	}

	if gvk == corev1.SchemeGroupVersion.WithKind("Pod") {
		binding := &corev1.Binding{}
		b := mk(http.MethodPost, item+"/binding", "create", "Binding", "post", "bind a Pod to a Node (sets spec.nodeName once)", join(itemParams, writeParams, []param{paramBody}))
		b.gvk = corev1.SchemeGroupVersion.WithKind("Binding")
		b.consumes = []string{mimeJSON}
		b.body = binding
		b.responses = []response{{http.StatusOK, binding}, {http.StatusCreated, binding}, {http.StatusAccepted, binding}}
		out = append(out, b)
	}
	return out
}

// itemRoutes are the read, replace and patch operations on one object (or
// on its status subresource, with suffix "Status").
func itemRoutes(mk func(method, path, verb, suffix, action, desc string, params []param) *route,
	path, suffix, what string, itemParams []param, obj any, join func(...[]param) []param) []*route {
	get := mk(http.MethodGet, path, "read", suffix, "get", "read "+what, itemParams)
	get.responses = []response{{http.StatusOK, obj}}

	put := mk(http.MethodPut, path, "replace", suffix, "put", "replace "+what, join(itemParams, writeParams, []param{paramBody}))
	put.consumes = []string{mimeJSON}
	put.body = obj
	put.responses = []response{{http.StatusOK, obj}, {http.StatusCreated, obj}}

	patch := mk(http.MethodPatch, path, "patch", suffix, "patch", "partially update "+what, join(itemParams, writeParams, []param{paramBody}))
	patch.consumes = []string{mimeJSONPatch, mimeMergePatch, mimeStrategicPatch}
	patch.body = &metav1.Patch{}
	patch.responses = []response{{http.StatusOK, obj}, {http.StatusCreated, obj}}

	return []*route{get, put, patch}
}

// operationGroupVersion is the group-version part of an operation ID as
// Kubernetes spells it: CoreV1, AppsV1, CoordinationV1, FlotillaDevV1alpha1.
func operationGroupVersion(gv schema.GroupVersion) string {
	group := gv.Group
	if group == "" {
		group = "core"
	}
	return camel(strings.TrimSuffix(group, ".k8s.io"), true) + camel(gv.Version, true)
}

// tagFor is the operation tag Kubernetes uses: core_v1, apps_v1,
// flotillaDev_v1alpha1.
func tagFor(gv schema.GroupVersion) string {
	group := gv.Group
	if group == "" {
		group = "core"
	}
	return camel(strings.TrimSuffix(group, ".k8s.io"), false) + "_" + gv.Version
}

// camel joins the dot- or dash-separated words of s in camel case.
func camel(s string, upperFirst bool) string {
	words := strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' })
	var b strings.Builder
	for i, w := range words {
		if w == "" {
			continue
		}
		if i > 0 || upperFirst {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		b.WriteString(w)
	}
	return b.String()
}
