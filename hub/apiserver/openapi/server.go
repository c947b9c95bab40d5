package openapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/internal/version"
)

// Paths the documents are served at.
const (
	PathV2 = "/openapi/v2"
	PathV3 = "/openapi/v3"
)

// ErrNoResources is returned by New when there is nothing to describe.
var ErrNoResources = errors.New("openapi: no resources to describe")

// Server serves the OpenAPI v2 and v3 documents of a set of resources. The
// documents are built once, in New; kube-openapi's handlers encode them
// (JSON, protobuf) on first request and answer later ones from cache, with
// ETags so clients that already hold a document get 304 Not Modified.
type Server struct {
	v2      *spec.Swagger
	v3      map[string]*spec3.OpenAPI // by "api/v1", "apis/apps/v1", ...
	v2Serve *handler.OpenAPIService
	v3Serve *handler3.OpenAPIService
	mux     *http.ServeMux
}

var _ http.Handler = (*Server)(nil)

// New builds the documents for the given resources (normally
// api.Resources()). It fails when a resource's kind has no generated schema:
// run `go generate ./hub/apiserver/openapi` after adding a kind.
func New(resources []*api.Resource) (*Server, error) {
	if len(resources) == 0 {
		return nil, ErrNoResources
	}
	n := newNamer(api.Scheme)
	info := &spec.Info{InfoProps: spec.InfoProps{Title: "Flotilla", Version: version.Version}}
	groups := containers(resources)

	routeContainers := make([]common.RouteContainer, len(groups))
	for i, c := range groups {
		routeContainers[i] = c
	}
	v2, err := builder.BuildOpenAPISpecFromRoutes(routeContainers, &common.Config{
		ProtocolList:                   []string{"https"},
		Info:                           info,
		GetDefinitions:                 GetOpenAPIDefinitions,
		GetDefinitionName:              n.definitionName,
		GetOperationIDAndTagsFromRoute: operationIDAndTags,
		CommonResponses: map[int]spec.Response{
			http.StatusUnauthorized: {ResponseProps: spec.ResponseProps{Description: http.StatusText(http.StatusUnauthorized)}},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("openapi: build v2 document: %w", err)
	}

	// The generated definitions refer to each other through this callback,
	// so the v3 set (refs into #/components/schemas) is made once and shared
	// by every group-version document.
	v3Defs := GetOpenAPIDefinitions(func(name string) spec.Ref {
		defName, _ := n.definitionName(name)
		return spec.MustCreateRef("#/components/schemas/" + common.EscapeJsonPointer(defName))
	})
	v3 := make(map[string]*spec3.OpenAPI, len(groups))
	v3Serve := handler3.NewOpenAPIService()
	for _, c := range groups {
		doc, err := builder3.BuildOpenAPISpecFromRoutes([]common.RouteContainer{c}, &common.OpenAPIV3Config{
			Info:                           info,
			Definitions:                    v3Defs,
			GetDefinitionName:              n.definitionName,
			GetOperationIDAndTagsFromRoute: operationIDAndTags,
			CommonResponses: map[int]*spec3.Response{
				http.StatusUnauthorized: {ResponseProps: spec3.ResponseProps{Description: http.StatusText(http.StatusUnauthorized)}},
			},
		})
		if err != nil {
			return nil, fmt.Errorf("openapi: build v3 document for %s: %w", c.root, err)
		}
		key := strings.TrimPrefix(c.root, "/")
		v3[key] = doc
		v3Serve.UpdateGroupVersion(key, doc)
	}

	s := &Server{
		v2:      v2,
		v3:      v3,
		v2Serve: handler.NewOpenAPIService(v2),
		v3Serve: v3Serve,
		mux:     http.NewServeMux(),
	}
	s.v2Serve.RegisterOpenAPIVersionedService(PathV2, s.mux)
	s.mux.HandleFunc(PathV3, s.v3Serve.HandleDiscovery)
	s.mux.HandleFunc(PathV3+"/", s.serveGroupVersion)
	return s, nil
}

func operationIDAndTags(r common.Route) (string, []string, error) {
	rt, ok := r.(*route)
	if !ok {
		return "", nil, fmt.Errorf("openapi: unexpected route type %T for %s %s", r, r.Method(), r.Path())
	}
	return rt.opID, []string{rt.tag}, nil
}

// Install mounts the documents on mux at /openapi/v2, /openapi/v3 and
// /openapi/v3/<group-version>.
func (s *Server) Install(mux *http.ServeMux) {
	for path, h := range s.Handlers() {
		mux.Handle(path, h)
	}
}

// Handlers maps each served path (a prefix when it ends in "/") to the
// server, in the form of apiserver.Config.Extra.
func (s *Server) Handlers() map[string]http.Handler {
	return map[string]http.Handler{PathV2: s, PathV3: s, PathV3 + "/": s}
}

// ServeHTTP serves GET and HEAD of /openapi/v2, /openapi/v3 and
// /openapi/v3/<group-version>; anything else under /openapi is 404 or 405.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("method %s is not allowed on %s: the OpenAPI documents are read-only", r.Method, r.URL.Path), http.StatusMethodNotAllowed)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// serveGroupVersion refuses unknown group-versions itself: kube-openapi's
// handler answers them with an empty 200.
func (s *Server) serveGroupVersion(w http.ResponseWriter, r *http.Request) {
	gv := strings.TrimPrefix(r.URL.Path, PathV3+"/")
	if _, ok := s.v3[gv]; !ok {
		http.Error(w, fmt.Sprintf("no OpenAPI document for group-version %q; the index at %s lists the served ones", gv, PathV3), http.StatusNotFound)
		return
	}
	s.v3Serve.HandleGroupVersion(w, r)
}

// V2 returns the OpenAPI v2 document. It is shared: do not modify it.
func (s *Server) V2() *spec.Swagger { return s.v2 }

// V3 returns the OpenAPI v3 document of a group-version, keyed as in the
// /openapi/v3 index ("api/v1", "apis/apps/v1"). It is shared: do not
// modify it.
func (s *Server) V3(groupVersion string) (*spec3.OpenAPI, bool) {
	doc, ok := s.v3[groupVersion]
	return doc, ok
}

// Schemas returns every schema of the v3 documents by definition name, as
// managedfields.NewTypeConverter wants them: server-side apply merges and
// tracks field ownership by these schemas (their list types and map keys),
// so the fields it knows are exactly the ones the documents describe. Each
// call builds a new map; the schemas themselves are shared.
func (s *Server) Schemas() map[string]*spec.Schema {
	out := map[string]*spec.Schema{}
	for _, doc := range s.v3 {
		if doc.Components == nil {
			continue
		}
		for name, sc := range doc.Components.Schemas {
			out[name] = withUntypedGVKs(sc)
		}
	}
	return out
}

// withUntypedGVKs returns sc with its group-version-kinds in the form a
// decoded document has them ([]any of map[string]any): the type converter
// finds a kind's schema by them and reads no other form. sc itself is
// shared with the served documents and stays as it is.
func withUntypedGVKs(sc *spec.Schema) *spec.Schema {
	gvks, ok := sc.Extensions[extensionGVK].([]metav1.GroupVersionKind)
	if !ok {
		return sc
	}
	list := make([]any, len(gvks))
	for i, g := range gvks {
		list[i] = map[string]any{"group": g.Group, "version": g.Version, "kind": g.Kind}
	}
	c := *sc
	c.Extensions = spec.Extensions{}
	for k, v := range sc.Extensions {
		c.Extensions[k] = v
	}
	c.Extensions[extensionGVK] = list
	return &c
}
