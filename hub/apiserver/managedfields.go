package apiserver

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/defaults"
	"flotilla.dev/flotilla/hub/apiserver/openapi"
)

// owner says whom a write records in metadata.managedFields. The zero
// value is a write of the hub's own (a binding, a namespace's finalizer)
// or one whose managedFields are already computed (an apply): it keeps
// them as they are.
type owner struct {
	manager string
	track   bool
	// subresource is the one the write came through when the hub writes
	// it as the main resource (scale): its entries say so, and it owns
	// only what that subresource can change.
	subresource string
}

// ownerOf is the manager of a create, update or non-apply patch, as
// kube-apiserver names it: the fieldManager parameter, else the client's
// user agent up to its first "/" ("kubectl", "flotilla-controllers").
func ownerOf(r *http.Request) owner {
	m := r.URL.Query().Get("fieldManager")
	if m == "" {
		m, _, _ = strings.Cut(r.UserAgent(), "/")
		if len(m) > metavalidation.FieldManagerMaxLength {
			m = m[:metavalidation.FieldManagerMaxLength]
		}
	}
	return owner{manager: m, track: true}
}

// checkFieldManager refuses a fieldManager parameter Kubernetes would
// refuse (too long, not printable), in its wording.
func checkFieldManager(r *http.Request, kind string) error {
	errs := metavalidation.ValidateFieldManager(r.URL.Query().Get("fieldManager"), field.NewPath("fieldManager"))
	if len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
	}
	return nil
}

// fieldManagers holds one managedfields.FieldManager for each served kind
// and subresource, made when first used: they merge applies and record who
// owns which field, by the schemas of the OpenAPI documents the hub serves
// (so the flotilla.dev kinds are covered as the Kubernetes ones are).
type fieldManagers struct {
	typeConverter func() (managedfields.TypeConverter, error)

	mu       sync.Mutex
	managers map[fieldManagerKey]*fieldManager
}

// fieldManager is the FieldManager of one kind and endpoint, with what
// ownedUpdate needs to answer the common update without it.
type fieldManager struct {
	m           *managedfields.FieldManager
	apiVersion  string
	subresource string
	// reset drops the fields a write through this endpoint cannot own.
	reset fieldpath.Filter
	// schema is an empty object of the kind, typed: what reconciling a
	// field set with the schema needs.
	schema *typed.TypedValue
	// owned: ownedUpdate may answer for this kind (its schema types every
	// field it can compare).
	owned bool
	// sets are managedFields sets already parsed and checked, by their
	// encoding (nil: one the FieldManager would rewrite).
	sets     sync.Map
	setCount atomic.Int64
}

type fieldManagerKey struct {
	res         *api.Resource
	subresource string
}

func newFieldManagers(tc managedfields.TypeConverter) *fieldManagers {
	f := &fieldManagers{managers: map[fieldManagerKey]*fieldManager{}}
	if tc != nil {
		f.typeConverter = func() (managedfields.TypeConverter, error) { return tc, nil }
	} else {
		f.typeConverter = defaultTypeConverter
	}
	return f
}

// defaultTypeConverter builds the type converter from the hub's own
// OpenAPI documents once per process, for servers whose Config names none
// (the hub passes the one of the documents it serves).
var defaultTypeConverter = sync.OnceValues(func() (managedfields.TypeConverter, error) {
	docs, err := openapi.New(api.Resources())
	if err != nil {
		return nil, err
	}
	return TypeConverter(docs)
})

// TypeConverter is the type information server-side apply needs, from the
// OpenAPI documents the hub serves.
func TypeConverter(docs *openapi.Server) (managedfields.TypeConverter, error) {
	tc, err := managedfields.NewTypeConverter(docs.Schemas(), false)
	if err != nil {
		return nil, fmt.Errorf("apiserver: the OpenAPI schemas cannot type server-side apply: %w", err)
	}
	return tc, nil
}

// get returns the field manager of res written through subresource (""
// "status" or "scale").
func (f *fieldManagers) get(res *api.Resource, subresource string) (*managedfields.FieldManager, error) {
	fm, err := f.manager(res, subresource)
	if err != nil {
		return nil, err
	}
	return fm.m, nil
}

func (f *fieldManagers) manager(res *api.Resource, subresource string) (*fieldManager, error) {
	key := fieldManagerKey{res, subresource}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.managers[key]; ok {
		return m, nil
	}
	tc, err := f.typeConverter()
	if err != nil {
		return nil, err
	}
	gv := res.GVR.GroupVersion()
	// The fields a write through this endpoint cannot change: nobody owns
	// them by writing there (the status through the main resource, the
	// rest through status), as the reset fields of Kubernetes' strategies.
	var filter fieldpath.Filter
	switch {
	case subresource == "status":
		filter = fieldpath.NewIncludeMatcherFilter(fieldpath.MakePrefixMatcherOrDie("status"))
	case subresource == "scale":
		filter = fieldpath.NewIncludeMatcherFilter(fieldpath.MakePrefixMatcherOrDie("spec", "replicas"))
	case res.HasStatus:
		filter = fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie("status")))
	}
	var reset map[fieldpath.APIVersion]fieldpath.Filter
	if filter != nil {
		reset = map[fieldpath.APIVersion]fieldpath.Filter{fieldpath.APIVersion(gv.String()): filter}
	}
	m, err := managedfields.NewDefaultFieldManager(tc, api.Scheme, hubDefaulter{}, api.Scheme, res.GVK(), gv, subresource, reset)
	if err != nil {
		return nil, fmt.Errorf("apiserver: field manager of %s: %w", res.GVR.Resource, err)
	}
	fm := &fieldManager{m: m, apiVersion: gv.String(), subresource: subresource, reset: filter}
	empty := res.New()
	empty.GetObjectKind().SetGroupVersionKind(res.GVK())
	if fm.schema, err = tc.ObjectToTyped(empty, typed.AllowDuplicates); err == nil {
		fm.owned = typesEveryField(tc, res)
	}
	f.managers[key] = fm
	return fm, nil
}

// hubDefaulter defaults what an apply merged as a create or update would
// be, so that defaulted fields do not read as changes.
type hubDefaulter struct{}

func (hubDefaulter) Default(obj runtime.Object) { defaults.Default(obj) }

// record sets obj's managedFields for a create (live nil) or an update of
// live by o. As in kube-apiserver, a failure keeps the managedFields live
// had rather than failing the write.
func (f *fieldManagers) record(res *api.Resource, subresource string, live, obj runtime.Object, o owner) runtime.Object {
	if !o.track {
		return obj
	}
	if o.subresource != "" {
		subresource = o.subresource
	}
	fm, err := f.manager(res, subresource)
	if err != nil {
		return obj
	}
	if live == nil {
		live = res.New()
		live.GetObjectKind().SetGroupVersionKind(res.GVK())
	} else if fm.owned {
		if out, ok := fm.ownedUpdate(live, obj, o.manager); ok {
			return out
		}
	}
	return fm.m.UpdateNoErrors(live, obj, o.manager)
}

// applyOptions are the query parameters of a server-side apply.
type applyOptions struct {
	manager string
	force   bool
}

// parsePatchOptions checks the fieldManager and force parameters of a
// patch of type pt, in Kubernetes' wording.
func parsePatchOptions(r *http.Request, pt types.PatchType) (applyOptions, error) {
	q := r.URL.Query()
	opts := metav1.PatchOptions{FieldManager: q.Get("fieldManager")}
	var force bool
	if v, ok := q["force"]; ok {
		force = len(v) > 0 && isTrue(v[0])
		opts.Force = &force
	}
	if errs := metavalidation.ValidatePatchOptions(&opts, pt); len(errs) > 0 {
		return applyOptions{}, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}, "", errs)
	}
	return applyOptions{manager: opts.FieldManager, force: force}, nil
}
