package openapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi3"
	"k8s.io/client-go/rest"
	"k8s.io/kube-openapi/pkg/spec3"
	openapiproto "k8s.io/kube-openapi/pkg/util/proto"
	"sigs.k8s.io/yaml"

	"flotilla.dev/flotilla/api"
)

const acceptProtoV2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"

// fieldsByKind names, for every served kind, fields that must be found by
// walking its schema (through references, arrays and maps as kubectl explain
// does) and the type they must have. A kind added to api.Resources without
// an entry here fails TestV2EveryServedKindResolves.
var fieldsByKind = map[string]map[string]string{
	"Namespace":          {"status.phase": "string", "metadata.name": "string"},
	"Node":               {"spec.podCIDR": "string", "status.capacity": "map", "spec.taints.effect": "string"},
	"Pod":                {"spec.containers": "array", "spec.containers.image": "string", "spec.containers.ports.containerPort": "integer", "spec.nodeName": "string", "status.phase": "string", "metadata.labels": "map"},
	"Service":            {"spec.ports.port": "integer", "spec.clusterIP": "string", "spec.selector": "map"},
	"ConfigMap":          {"data": "map", "immutable": "boolean"},
	"Secret":             {"data": "map", "type": "string"},
	"Event":              {"involvedObject.name": "string", "reason": "string", "count": "integer"},
	"Deployment":         {"spec.replicas": "integer", "spec.template.spec.containers.image": "string", "status.readyReplicas": "integer"},
	"ReplicaSet":         {"spec.selector.matchLabels": "map", "spec.replicas": "integer"},
	"DaemonSet":          {"spec.updateStrategy.type": "string", "status.numberReady": "integer"},
	"ControllerRevision": {"revision": "integer", "data": "map"},
	"Job":                {"spec.completions": "integer", "spec.template.spec.restartPolicy": "string", "status.succeeded": "integer", "status.conditions.type": "string"},
	"CronJob":            {"spec.schedule": "string", "spec.timeZone": "string", "spec.jobTemplate.spec.template.spec.restartPolicy": "string", "status.lastScheduleTime": "string", "status.active.name": "string"},
	"PriorityClass":      {"value": "integer", "globalDefault": "boolean", "preemptionPolicy": "string", "description": "string"},
	"Lease":              {"spec.holderIdentity": "string", "spec.leaseDurationSeconds": "integer"},
	"EndpointSlice":      {"endpoints.addresses": "array", "addressType": "string", "ports.port": "integer"},
	"GitSource":          {"spec.url": "string", "spec.ref.branch": "string", "spec.prune": "boolean", "status.lastAppliedCommit": "string", "status.lastHandledReconcileAt": "string", "status.conditions.type": "string", "status.inventory.kind": "string"},
	"RolloutPolicy":      {"spec.selector.matchLabels": "map", "spec.waves.name": "string", "spec.waves.percent": "integer", "spec.waves.nodeSelector.matchLabels": "map", "spec.successCriteria.maxFailures": "string", "spec.onFailure": "string", "spec.paused": "boolean", "status.workloads.phase": "string", "status.workloads.waves.failedDevices.reason": "string", "status.workloads.conditions.type": "string"},
}

func newTestServer(t *testing.T) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(api.Resources())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	mux := http.NewServeMux()
	s.Install(mux)
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return s, srv
}

func get(t *testing.T, srv *httptest.Server, path string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := srv.Client()
	// Redirects are part of what some tests check.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readBody(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// modelsByGVK indexes the models the way kubectl does: by the
// group-version-kinds listed in each definition's extension.
func modelsByGVK(t *testing.T, models openapiproto.Models) map[schema.GroupVersionKind]openapiproto.Schema {
	t.Helper()
	out := map[schema.GroupVersionKind]openapiproto.Schema{}
	for _, name := range models.ListModels() {
		m := models.LookupModel(name)
		list, _ := m.GetExtensions()[extensionGVK].([]any)
		for _, item := range list {
			fields := map[string]string{}
			switch v := item.(type) {
			case map[any]any:
				for k, val := range v {
					fields[fmt.Sprint(k)] = fmt.Sprint(val)
				}
			case map[string]any:
				for k, val := range v {
					fields[k] = fmt.Sprint(val)
				}
			}
			out[schema.GroupVersionKind{Group: fields["group"], Version: fields["version"], Kind: fields["kind"]}] = m
		}
	}
	return out
}

// walk follows a dotted field path through a schema, stepping into
// references, array items and map values the way kubectl explain does, and
// names the type found at the end.
func walk(s openapiproto.Schema, path string) (string, error) {
	for _, field := range append(strings.Split(path, "."), "") {
		for {
			switch v := s.(type) {
			case openapiproto.Reference:
				s = v.SubSchema()
				continue
			case *openapiproto.Array:
				if field == "" {
					return "array", nil
				}
				s = v.SubType
				continue
			case *openapiproto.Map:
				if field == "" {
					return "map", nil
				}
				s = v.SubType
				continue
			}
			break
		}
		if field == "" {
			switch v := s.(type) {
			case *openapiproto.Primitive:
				return v.Type, nil
			case *openapiproto.Kind:
				return "object", nil
			default:
				return fmt.Sprintf("%T", s), nil
			}
		}
		kind, ok := s.(*openapiproto.Kind)
		if !ok {
			return "", fmt.Errorf("%q: %s is a %T, not an object", path, field, s)
		}
		next, ok := kind.Fields[field]
		if !ok {
			return "", fmt.Errorf("%q: no field %s in %s", path, field, kind.GetPath())
		}
		s = next
	}
	return "", errors.New("unreachable")
}

// TestV2EveryServedKindResolves reads /openapi/v2 in protobuf, as kubectl
// does, and checks that every served kind and its list kind are found by
// group-version-kind with the fields users rely on.
func TestV2EveryServedKindResolves(t *testing.T) {
	_, srv := newTestServer(t)
	resp := get(t, srv, PathV2, map[string]string{"Accept": acceptProtoV2 + ", application/json"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "protobuf") {
		t.Fatalf("Content-Type %q, want protobuf", ct)
	}
	doc := &openapi_v2.Document{}
	if err := proto.Unmarshal(readBody(t, resp), doc); err != nil {
		t.Fatalf("decode protobuf document: %v", err)
	}
	models, err := openapiproto.NewOpenAPIData(doc)
	if err != nil {
		t.Fatalf("NewOpenAPIData: %v", err)
	}
	byGVK := modelsByGVK(t, models)

	for _, r := range api.Resources() {
		m, ok := byGVK[r.GVK()]
		if !ok {
			t.Errorf("%s: no definition carries its group-version-kind", r.GVK())
			continue
		}
		fields := map[string]string{"metadata.resourceVersion": "string", "apiVersion": "string", "kind": "string"}
		if _, ok := fieldsByKind[r.Kind]; !ok {
			t.Errorf("%s: no expected fields listed in fieldsByKind", r.Kind)
		}
		for path, typ := range fieldsByKind[r.Kind] {
			fields[path] = typ
		}
		for path, want := range fields {
			got, err := walk(m, path)
			if err != nil {
				t.Errorf("%s: %v", r.Kind, err)
			} else if got != want {
				t.Errorf("%s.%s is %s, want %s", r.Kind, path, got, want)
			}
		}
		list, ok := byGVK[r.GVR.GroupVersion().WithKind(r.ListKind)]
		if !ok {
			t.Errorf("%s: no definition for list kind %s", r.GVK(), r.ListKind)
			continue
		}
		if got, err := walk(list, "items.metadata.name"); err != nil || got != "string" {
			t.Errorf("%s.items.metadata.name: %s, %v", r.ListKind, got, err)
		}
	}

	// The extensions kubectl's strategic merge and apply use survive.
	containers := byGVK[schema.GroupVersionKind{Version: "v1", Kind: "Pod"}].(*openapiproto.Kind).Fields["spec"].(openapiproto.Reference).SubSchema().(*openapiproto.Kind).Fields["containers"]
	ext := containers.GetExtensions()
	if ext["x-kubernetes-patch-merge-key"] != "name" || ext["x-kubernetes-list-type"] != "map" {
		t.Errorf("Pod spec.containers extensions = %v, want patch-merge-key name and list-type map", ext)
	}
}

// TestV2DeclaresQueryParameters checks, the way kubectl's query-parameter
// verifier does, that each kind's write operations declare fieldValidation
// (without it kubectl apply refuses to run), and that lists declare what
// informers and kubectl send.
func TestV2DeclaresQueryParameters(t *testing.T) {
	_, srv := newTestServer(t)
	resp := get(t, srv, PathV2, map[string]string{"Accept": "application/json"})
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	doc, err := openapi_v2.ParseDocument(readBody(t, resp))
	if err != nil {
		t.Fatalf("parse JSON document: %v", err)
	}
	global := map[string]*openapi_v2.NamedParameter{}
	for _, p := range doc.GetParameters().GetAdditionalProperties() {
		global["#/parameters/"+p.GetName()] = p
	}
	queryParams := func(params []*openapi_v2.ParametersItem) map[string]bool {
		out := map[string]bool{}
		for _, p := range params {
			q := p.GetParameter().GetNonBodyParameter().GetQueryParameterSubSchema()
			if ref := p.GetJsonReference().GetXRef(); ref != "" {
				if g, ok := global[ref]; ok {
					q = g.GetValue().GetNonBodyParameter().GetQueryParameterSubSchema()
				}
			}
			if q != nil {
				out[q.GetName()] = true
			}
		}
		return out
	}
	gvkOf := func(op *openapi_v2.Operation) schema.GroupVersionKind {
		for _, e := range op.GetVendorExtension() {
			if e.GetName() == extensionGVK {
				var v map[string]string
				if err := yaml.Unmarshal([]byte(e.GetValue().GetYaml()), &v); err != nil {
					t.Fatalf("operation %s: bad %s: %v", op.GetOperationId(), extensionGVK, err)
				}
				return schema.GroupVersionKind{Group: v["group"], Version: v["version"], Kind: v["kind"]}
			}
		}
		return schema.GroupVersionKind{}
	}

	actionOf := func(op *openapi_v2.Operation) string {
		for _, e := range op.GetVendorExtension() {
			if e.GetName() == extensionAction {
				var v string
				if err := yaml.Unmarshal([]byte(e.GetValue().GetYaml()), &v); err != nil {
					t.Fatalf("operation %s: bad %s: %v", op.GetOperationId(), extensionAction, err)
				}
				return v
			}
		}
		return ""
	}
	type opInfo struct {
		params map[string]bool
		path   string
		action string
	}
	ops := map[schema.GroupVersionKind]map[string][]opInfo{} // gvk -> method -> ops
	for _, item := range doc.GetPaths().GetPath() {
		pathParams := queryParams(item.GetValue().GetParameters())
		for method, op := range map[string]*openapi_v2.Operation{
			"get": item.GetValue().GetGet(), "post": item.GetValue().GetPost(), "put": item.GetValue().GetPut(),
			"patch": item.GetValue().GetPatch(), "delete": item.GetValue().GetDelete(),
		} {
			if op == nil {
				continue
			}
			params := queryParams(op.GetParameters())
			for k := range pathParams {
				params[k] = true
			}
			gvk := gvkOf(op)
			if ops[gvk] == nil {
				ops[gvk] = map[string][]opInfo{}
			}
			ops[gvk][method] = append(ops[gvk][method], opInfo{params: params, path: item.GetName(), action: actionOf(op)})
		}
	}

	for _, r := range api.Resources() {
		byMethod := ops[r.GVK()]
		actions := map[string]bool{}
		for _, list := range byMethod {
			for _, op := range list {
				actions[op.action] = true
			}
		}
		for _, a := range []string{"get", "list", "post", "put", "patch", "delete", "deletecollection", "watch", "watchlist"} {
			if !actions[a] {
				t.Errorf("%s: no operation with %s %q (has %v)", r.GVK(), extensionAction, a, actions)
			}
		}
		for _, method := range []string{"post", "put", "patch"} {
			for _, op := range byMethod[method] {
				for _, p := range []string{"fieldValidation", "dryRun", "fieldManager"} {
					if !op.params[p] {
						t.Errorf("%s %s %s: no %s parameter", r.Kind, method, op.path, p)
					}
				}
			}
		}
		for _, op := range byMethod["delete"] {
			for _, p := range []string{"gracePeriodSeconds", "propagationPolicy", "dryRun"} {
				if !op.params[p] {
					t.Errorf("%s delete %s: no %s parameter", r.Kind, op.path, p)
				}
			}
		}
		lists := 0
		for _, op := range byMethod["get"] {
			if !op.params["watch"] {
				continue
			}
			lists++
			for _, p := range []string{"labelSelector", "fieldSelector", "resourceVersion", "timeoutSeconds", "allowWatchBookmarks", "sendInitialEvents", "limit", "continue"} {
				if !op.params[p] {
					t.Errorf("%s list %s: no %s parameter", r.Kind, op.path, p)
				}
			}
		}
		want := 1
		if r.Namespaced {
			want = 2 // in a namespace and across all of them
		}
		if lists != want {
			t.Errorf("%s: %d list operations, want %d", r.Kind, lists, want)
		}
		if r.HasStatus {
			found := false
			for _, op := range byMethod["patch"] {
				found = found || strings.HasSuffix(op.path, "/{name}/status")
			}
			if !found {
				t.Errorf("%s: has a status subresource but no PATCH .../status operation", r.Kind)
			}
		}
	}
	legacyWatch := false
	for _, item := range doc.GetPaths().GetPath() {
		if item.GetName() != "/api/v1/watch/namespaces/{namespace}/pods" {
			continue
		}
		legacyWatch = true
		for _, code := range item.GetValue().GetGet().GetResponses().GetResponseCode() {
			if code.GetName() == "200" {
				if ref := code.GetValue().GetResponse().GetSchema().GetSchema().GetXRef(); ref != "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent" {
					t.Errorf("legacy pod watch answers %q, want WatchEvent", ref)
				}
			}
		}
	}
	if !legacyWatch {
		t.Error("no /api/v1/watch/namespaces/{namespace}/pods path")
	}
	binding := ops[schema.GroupVersionKind{Version: "v1", Kind: "Binding"}]["post"]
	if len(binding) != 1 || binding[0].path != "/api/v1/namespaces/{namespace}/pods/{name}/binding" {
		t.Errorf("pods/binding operations = %+v", binding)
	}
}

// TestV3WithClientGo reads the v3 index and group-version documents with
// client-go's OpenAPI v3 client, the code kubectl explain and kubectl's
// query-parameter verifier use.
func TestV3WithClientGo(t *testing.T) {
	_, srv := newTestServer(t)
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	paths, err := dc.OpenAPIV3().Paths()
	if err != nil {
		t.Fatalf("read /openapi/v3 index: %v", err)
	}
	if len(paths) != len(api.GroupVersions()) {
		t.Errorf("index lists %d group-versions, want %d", len(paths), len(api.GroupVersions()))
	}
	for key, gv := range paths {
		if u := gv.ServerRelativeURL(); !strings.HasPrefix(u, PathV3+"/"+key+"?hash=") {
			t.Errorf("index entry %s: serverRelativeURL %q", key, u)
		}
	}

	root := openapi3.NewRoot(dc.OpenAPIV3())
	gvs, err := root.GroupVersions()
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(gvs, func(i, j int) bool { return gvs[i].String() < gvs[j].String() })
	want := append([]schema.GroupVersion(nil), api.GroupVersions()...)
	sort.Slice(want, func(i, j int) bool { return want[i].String() < want[j].String() })
	if fmt.Sprint(gvs) != fmt.Sprint(want) {
		t.Errorf("group-versions %v, want %v", gvs, want)
	}
	for _, gv := range api.GroupVersions() {
		doc, err := root.GVSpec(gv)
		if err != nil {
			t.Fatalf("GVSpec(%s): %v", gv, err)
		}
		for path := range doc.Paths.Paths {
			if !strings.HasPrefix(path, "/"+gvPath(gv)+"/") {
				t.Errorf("%s document has foreign path %s", gv, path)
			}
		}
		for _, r := range api.Resources() {
			if r.GVR.GroupVersion() != gv {
				continue
			}
			if err := supportsFieldValidationV3(doc, r.GVK()); err != nil {
				t.Errorf("%s: %v", r.GVK(), err)
			}
			if !hasSchemaForGVK(doc, r.GVK(), "spec", "metadata") && !hasSchemaForGVK(doc, r.GVK(), "metadata") {
				t.Errorf("%s document: no schema tagged %s", gv, r.GVK())
			}
		}
	}
	pods, _ := root.GVSpec(schema.GroupVersion{Version: "v1"})
	if !hasSchemaForGVK(pods, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "spec", "status", "metadata", "apiVersion", "kind") {
		t.Error("api/v1 document: Pod schema lacks its top-level fields")
	}
}

// supportsFieldValidationV3 mirrors kubectl's v3 query-parameter verifier:
// the PATCH operations of the kind must declare fieldValidation.
func supportsFieldValidationV3(doc *spec3.OpenAPI, gvk schema.GroupVersionKind) error {
	found := 0
	for path, item := range doc.Paths.Paths {
		op := item.Patch
		if op == nil || !gvkExtensionIs(op.Extensions[extensionGVK], gvk) {
			continue
		}
		found++
		ok := false
		for _, p := range op.Parameters {
			ok = ok || (p.Name == "fieldValidation" && p.In == "query")
		}
		if !ok {
			return fmt.Errorf("PATCH %s does not declare the fieldValidation query parameter", path)
		}
	}
	if found == 0 {
		return errors.New("no PATCH operation carries the group-version-kind")
	}
	return nil
}

func gvkExtensionIs(v any, gvk schema.GroupVersionKind) bool {
	m, ok := v.(map[string]any)
	return ok && m["group"] == gvk.Group && m["version"] == gvk.Version && m["kind"] == gvk.Kind
}

func hasSchemaForGVK(doc *spec3.OpenAPI, gvk schema.GroupVersionKind, fields ...string) bool {
	for _, s := range doc.Components.Schemas {
		list, _ := s.Extensions[extensionGVK].([]any)
		for _, item := range list {
			if !gvkExtensionIs(item, gvk) {
				continue
			}
			for _, f := range fields {
				if _, ok := s.Properties[f]; !ok {
					return false
				}
			}
			return true
		}
	}
	return false
}

func TestETagsAndConditionalRequests(t *testing.T) {
	_, srv := newTestServer(t)

	for _, tc := range []struct {
		path   string
		accept string
	}{
		{PathV2, "application/json"},
		{PathV2, acceptProtoV2},
		{PathV3, "application/json"},
		{PathV3 + "/apis/apps/v1", "application/json"},
	} {
		first := get(t, srv, tc.path, map[string]string{"Accept": tc.accept})
		body := readBody(t, first)
		etag := first.Header.Get("ETag")
		if first.StatusCode != http.StatusOK || len(body) == 0 || etag == "" {
			t.Errorf("GET %s (%s): status %d, %d bytes, ETag %q", tc.path, tc.accept, first.StatusCode, len(body), etag)
			continue
		}
		again := get(t, srv, tc.path, map[string]string{"Accept": tc.accept, "If-None-Match": etag})
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match of its ETag: status %d, want 304", tc.path, again.StatusCode)
		}
		stale := get(t, srv, tc.path, map[string]string{"Accept": tc.accept, "If-None-Match": `"0123"`})
		if stale.StatusCode != http.StatusOK {
			t.Errorf("GET %s with a stale ETag: status %d, want 200", tc.path, stale.StatusCode)
		}
	}

	// The index links each document by its hash; an old hash redirects to
	// the current one and the current one may be cached for good.
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(readBody(t, get(t, srv, PathV3, nil)), &index); err != nil {
		t.Fatal(err)
	}
	current := index.Paths["api/v1"].ServerRelativeURL
	resp := get(t, srv, current, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Cache-Control"), "immutable") {
		t.Errorf("GET %s: status %d, Cache-Control %q", current, resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	old := get(t, srv, PathV3+"/api/v1?hash=0123", nil)
	if old.StatusCode != http.StatusMovedPermanently || old.Header.Get("Location") != current {
		t.Errorf("GET with an old hash: status %d, Location %q, want 301 to %s", old.StatusCode, old.Header.Get("Location"), current)
	}
}

func TestRefusals(t *testing.T) {
	_, srv := newTestServer(t)
	for path, want := range map[string]int{
		PathV3 + "/apis/policy/v1": http.StatusNotFound,
		PathV3 + "/":               http.StatusNotFound,
	} {
		if resp := get(t, srv, path, nil); resp.StatusCode != want {
			t.Errorf("GET %s: status %d, want %d", path, resp.StatusCode, want)
		}
	}
	if resp := get(t, srv, PathV2, map[string]string{"Accept": "text/html"}); resp.StatusCode != http.StatusNotAcceptable {
		t.Errorf("GET %s as text/html: status %d, want 406", PathV2, resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+PathV2, strings.NewReader("{}"))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST %s: status %d, want 405", PathV2, resp.StatusCode)
	}
}

// TestHandlersByPrefix serves the documents the way the apiserver mounts
// extra handlers: exact paths, and subtrees for keys ending in "/".
func TestHandlersByPrefix(t *testing.T) {
	s, err := New(api.Resources())
	if err != nil {
		t.Fatal(err)
	}
	handlers := s.Handlers()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for prefix, h := range handlers {
			if r.URL.Path == prefix || (strings.HasSuffix(prefix, "/") && strings.HasPrefix(r.URL.Path, prefix)) {
				h.ServeHTTP(w, r)
				return
			}
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	for _, path := range []string{PathV2, PathV3, PathV3 + "/api/v1", PathV3 + "/apis/flotilla.dev/v1alpha1"} {
		resp := get(t, srv, path, map[string]string{"Accept": "application/json"})
		if resp.StatusCode != http.StatusOK || !json.Valid(readBody(t, resp)) {
			t.Errorf("GET %s: status %d or not JSON", path, resp.StatusCode)
		}
	}
}

func TestNewRefusesWhatItCannotDescribe(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, ErrNoResources) {
		t.Errorf("New(nil) = %v, want ErrNoResources", err)
	}
	// A kind without generated schemas must fail loudly, not serve a
	// document kubectl cannot use.
	pdbs := &api.Resource{
		GVR: policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"), Kind: "PodDisruptionBudget", ListKind: "PodDisruptionBudgetList", Namespaced: true,
		New: func() runtime.Object { return &policyv1.PodDisruptionBudget{} }, NewList: func() runtime.Object { return &policyv1.PodDisruptionBudgetList{} },
	}
	if _, err := New([]*api.Resource{pdbs}); err == nil || !strings.Contains(err.Error(), "PodDisruptionBudget") {
		t.Errorf("New(poddisruptionbudgets) = %v, want an error naming the PodDisruptionBudget type", err)
	}
}

// TestDocumentsAreStable checks that two builds give byte-identical
// documents: the ETag clients cache by must not change across hub restarts.
func TestDocumentsAreStable(t *testing.T) {
	a, err := New(api.Resources())
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(api.Resources())
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a.V2())
	jb, _ := json.Marshal(b.V2())
	if string(ja) != string(jb) {
		t.Error("two builds of the v2 document differ")
	}
	for _, gv := range api.GroupVersions() {
		da, _ := a.V3(gvPath(gv))
		db, ok := b.V3(gvPath(gv))
		if !ok {
			t.Fatalf("V3(%q) missing", gvPath(gv))
		}
		ja, _ := json.Marshal(da)
		jb, _ := json.Marshal(db)
		if string(ja) != string(jb) {
			t.Errorf("two builds of the %s v3 document differ", gv)
		}
	}
}
