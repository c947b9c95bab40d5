package apiserver

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"flotilla.dev/flotilla/api"
)

// The common update — a device renewing its Lease, a controller bumping a
// counter — changes only scalar fields its manager already owns. The
// structured-merge machinery would convert both objects to typed values,
// diff them and find that nothing but the manager's time changes; that is
// a fifth of a Lease renewal's CPU. ownedUpdate finds the same answer from
// the Go objects and the managedFields, and declines (falling back to the
// FieldManager) whenever the answer could be anything else, so its result
// is the FieldManager's, entry for entry. TestOwnedUpdateMatchesFieldManager
// holds it to that.

// maxUpdateManagers is the library's DefaultMaxUpdateManagers: beyond it
// an update merges the oldest Update entries, which ownedUpdate does not.
const maxUpdateManagers = 10

// stripped are the paths no manager is recorded to own (the library's
// stripMetaManager): changes to them refresh no time.
var stripped = fieldpath.NewSet(
	fieldpath.MakePathOrDie("apiVersion"),
	fieldpath.MakePathOrDie("kind"),
	fieldpath.MakePathOrDie("metadata"),
	fieldpath.MakePathOrDie("metadata", "name"),
	fieldpath.MakePathOrDie("metadata", "namespace"),
	fieldpath.MakePathOrDie("metadata", "creationTimestamp"),
	fieldpath.MakePathOrDie("metadata", "selfLink"),
	fieldpath.MakePathOrDie("metadata", "uid"),
	fieldpath.MakePathOrDie("metadata", "clusterName"),
	fieldpath.MakePathOrDie("metadata", "generation"),
	fieldpath.MakePathOrDie("metadata", "managedFields"),
	fieldpath.MakePathOrDie("metadata", "resourceVersion"),
)

// ownedUpdate returns obj with the managedFields the FieldManager would
// give an update of live to obj by manager through fm's endpoint, and
// false when it cannot tell them cheaply.
func (fm *fieldManager) ownedUpdate(live, obj runtime.Object, manager string) (runtime.Object, bool) {
	lm, err := meta.Accessor(live)
	if err != nil {
		return nil, false
	}
	om, err := meta.Accessor(obj)
	if err != nil {
		return nil, false
	}
	entries := lm.GetManagedFields()
	if len(entries) == 0 {
		return nil, false
	}
	// The FieldManager takes the managedFields the client sent, when it
	// sent any, to the main resource; the common case sends back what it
	// read.
	if sent := om.GetManagedFields(); fm.subresource == "" && sent != nil && !equalEntries(sent, entries) {
		return nil, false
	}
	// The walk first: it turns most other updates away before any
	// managedFields are parsed.
	var d differ
	if !d.object(reflect.ValueOf(live), reflect.ValueOf(obj)) {
		return nil, false
	}
	if manager == "" {
		manager = "unknown"
	}
	sets, self, ok := fm.decode(entries, manager)
	if !ok {
		return nil, false
	}
	refresh := false
	for _, p := range d.changed {
		owned := false
		for i, s := range sets {
			if s.Has(p) {
				if i != self {
					// Another manager loses it: not the common case.
					return nil, false
				}
				owned = true
			}
		}
		if stripped.Has(p) {
			if owned {
				return nil, false
			}
			continue
		}
		if !owned || (fm.reset != nil && !fm.reset.Filter(fieldpath.NewSet(p)).Has(p)) {
			return nil, false
		}
		refresh = true
	}
	out := slices.Clone(entries)
	if refresh {
		out[self].Time = &metav1.Time{Time: time.Now().UTC()}
	}
	slices.SortFunc(out, compareEntries)
	om.SetManagedFields(out)
	return obj, true
}

// decode parses the managedFields entries as the FieldManager would, and
// returns each one's set and the index of manager's Update entry. It
// declines entries the FieldManager would rewrite rather than keep: of
// another API version, duplicated, empty, not in canonical form, not
// reconciled with the schema, or more Update entries than it keeps.
func (fm *fieldManager) decode(entries []metav1.ManagedFieldsEntry, manager string) ([]*fieldpath.Set, int, bool) {
	sets := make([]*fieldpath.Set, len(entries))
	self, updates := -1, 0
	for i := range entries {
		e := &entries[i]
		if e.APIVersion != fm.apiVersion || e.FieldsType != "FieldsV1" || e.FieldsV1 == nil {
			return nil, 0, false
		}
		switch e.Operation {
		case metav1.ManagedFieldsOperationUpdate:
			updates++
			if e.Manager == manager && e.Subresource == fm.subresource {
				if self >= 0 {
					return nil, 0, false
				}
				self = i
			}
		case metav1.ManagedFieldsOperationApply:
		default:
			return nil, 0, false
		}
		for j := range i {
			if sameManager(&entries[j], e) {
				return nil, 0, false
			}
		}
		s, ok := fm.parseSet(e.FieldsV1.Raw)
		if !ok {
			return nil, 0, false
		}
		sets[i] = s
	}
	if self < 0 || updates > maxUpdateManagers {
		return nil, 0, false
	}
	return sets, self, true
}

// parseSet decodes a FieldsV1 and checks it is what the FieldManager would
// write back: canonical and already reconciled with the schema. Verdicts
// are kept by the encoded set: a fleet's Leases all carry the same one.
func (fm *fieldManager) parseSet(raw []byte) (*fieldpath.Set, bool) {
	if v, ok := fm.sets.Load(string(raw)); ok {
		s := v.(*fieldpath.Set)
		return s, s != nil
	}
	s := &fieldpath.Set{}
	if err := s.FromJSON(bytes.NewReader(raw)); err != nil || s.Empty() {
		s = nil
	} else if back, err := s.ToJSON(); err != nil || !bytes.Equal(back, raw) {
		s = nil
	} else if r, err := typed.ReconcileFieldSetWithSchema(s, fm.schema); err != nil || r != nil {
		s = nil
	}
	if fm.setCount.Add(1) > maxCachedSets {
		// A bound, not an eviction policy: sets are few in practice.
		fm.sets.Clear()
		fm.setCount.Store(1)
	}
	fm.sets.Store(string(raw), s)
	return s, s != nil
}

const maxCachedSets = 4096

// sameManager: a and b name one manager, as the FieldManager keys them
// (Apply entries regardless of API version).
func sameManager(a, b *metav1.ManagedFieldsEntry) bool {
	if a.Manager != b.Manager || a.Operation != b.Operation || a.Subresource != b.Subresource {
		return false
	}
	return a.Operation == metav1.ManagedFieldsOperationApply || a.APIVersion == b.APIVersion
}

func equalEntries(a, b []metav1.ManagedFieldsEntry) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.ManagedFieldsEntry) bool {
		if x.Manager != y.Manager || x.Operation != y.Operation || x.APIVersion != y.APIVersion ||
			x.FieldsType != y.FieldsType || x.Subresource != y.Subresource {
			return false
		}
		if (x.Time == nil) != (y.Time == nil) || (x.Time != nil && !x.Time.Equal(y.Time)) {
			return false
		}
		if (x.FieldsV1 == nil) != (y.FieldsV1 == nil) {
			return false
		}
		return x.FieldsV1 == nil || bytes.Equal(x.FieldsV1.Raw, y.FieldsV1.Raw)
	})
}

// compareEntries is the order the FieldManager writes entries in:
// operation, time to the second, manager, API version, subresource.
func compareEntries(p, q metav1.ManagedFieldsEntry) int {
	if c := strings.Compare(string(p.Operation), string(q.Operation)); c != 0 {
		return c
	}
	var ps, qs int64
	if p.Time != nil {
		ps = p.Time.Unix()
	}
	if q.Time != nil {
		qs = q.Time.Unix()
	}
	if ps != qs {
		if ps < qs {
			return -1
		}
		return 1
	}
	if c := strings.Compare(p.Manager, q.Manager); c != 0 {
		return c
	}
	if c := strings.Compare(p.APIVersion, q.APIVersion); c != 0 {
		return c
	}
	return strings.Compare(p.Subresource, q.Subresource)
}

// differ walks two objects of one Go type as their JSON has them and
// collects the paths of the scalar fields that differ, set on both sides.
// Any other difference — a field set on one side only, a list, a map, a
// value whose JSON it cannot tell — ends the walk with false, as does a
// non-empty list or map it cannot vouch the typed conversion accepts (the
// FieldManager keeps the old managedFields when it fails).
type differ struct {
	names   []string
	changed []fieldpath.Path
}

func (d *differ) object(a, b reflect.Value) bool {
	if a.Kind() != reflect.Pointer || b.Type() != a.Type() || a.IsNil() || b.IsNil() {
		return false
	}
	return d.value(a.Elem(), b.Elem())
}

var (
	timeType        = reflect.TypeFor[metav1.Time]()
	microTimeType   = reflect.TypeFor[metav1.MicroTime]()
	objectMetaType  = reflect.TypeFor[metav1.ObjectMeta]()
	ownerRefsType   = reflect.TypeFor[[]metav1.OwnerReference]()
	jsonMarshaler   = reflect.TypeFor[interface{ MarshalJSON() ([]byte, error) }]()
	unstructuredCvt = reflect.TypeFor[interface{ ToUnstructured() any }]()
)

func (d *differ) value(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() && b.IsNil()
		}
		return d.value(a.Elem(), b.Elem())
	case reflect.Struct:
		info := structInfo(a.Type())
		switch info.kind {
		case timeStruct:
			// The JSON has seconds.
			at, bt := a.Addr().Interface().(*metav1.Time), b.Addr().Interface().(*metav1.Time)
			return d.leaf(at.IsZero(), bt.IsZero(), at.Unix() == bt.Unix())
		case microTimeStruct:
			at, bt := a.Addr().Interface().(*metav1.MicroTime), b.Addr().Interface().(*metav1.MicroTime)
			var ab, bb [40]byte
			return d.leaf(at.IsZero(), bt.IsZero(),
				bytes.Equal(at.UTC().AppendFormat(ab[:0], metav1.RFC3339Micro), bt.UTC().AppendFormat(bb[:0], metav1.RFC3339Micro)))
		case customStruct:
			// Quantities, IntOrStrings, raw extensions: only unchanged.
			return reflect.DeepEqual(a.Interface(), b.Interface())
		}
		return d.fields(info.fields, a, b)
	case reflect.String:
		return d.leaf(a.Len() == 0, b.Len() == 0, a.String() == b.String())
	case reflect.Bool:
		return d.leaf(!a.Bool(), !b.Bool(), a.Bool() == b.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return d.leaf(a.Int() == 0, b.Int() == 0, a.Int() == b.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return d.leaf(a.Uint() == 0, b.Uint() == 0, a.Uint() == b.Uint())
	case reflect.Slice, reflect.Map:
		if a.Len() == 0 && b.Len() == 0 {
			// nil and empty differ in JSON only where omitempty is not
			// set; keep to equal ones.
			return a.IsNil() == b.IsNil()
		}
		return typable(a) && reflect.DeepEqual(a.Interface(), b.Interface())
	}
	// Floats (-0 and 0 are one JSON number), interfaces, arrays.
	return false
}

// leaf records the current path when a scalar changed between two set
// values; a value set on one side only (omitted as empty) is no scalar
// change.
func (d *differ) leaf(aZero, bZero, equal bool) bool {
	if equal {
		return true
	}
	if aZero || bZero {
		return false
	}
	p := make(fieldpath.Path, len(d.names))
	for i, n := range d.names {
		p[i] = fieldpath.PathElement{FieldName: &n}
	}
	d.changed = append(d.changed, p)
	return true
}

func (d *differ) fields(fields []jsonField, a, b reflect.Value) bool {
	for _, f := range fields {
		if f.inline {
			if !d.value(a.Field(f.index), b.Field(f.index)) {
				return false
			}
			continue
		}
		d.names = append(d.names, f.name)
		ok := d.value(a.Field(f.index), b.Field(f.index))
		d.names = d.names[:len(d.names)-1]
		if !ok {
			return false
		}
	}
	return true
}

// typable: a non-empty list or map the typed conversion always accepts —
// of strings (sets and atomic lists, string maps), or owner references
// with their key, the uid.
func typable(v reflect.Value) bool {
	switch {
	case v.Type() == ownerRefsType:
		for _, r := range v.Interface().([]metav1.OwnerReference) {
			if r.UID == "" {
				return false
			}
		}
		return true
	case v.Kind() == reflect.Slice:
		return v.Type().Elem().Kind() == reflect.String
	default:
		return v.Type().Key().Kind() == reflect.String && v.Type().Elem().Kind() == reflect.String
	}
}

func customJSON(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(jsonMarshaler) || pt.Implements(jsonMarshaler) || t.Implements(unstructuredCvt) || pt.Implements(unstructuredCvt)
}

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	index  int
	name   string
	inline bool
}

// How the differ treats a struct type.
const (
	plainStruct = iota
	timeStruct
	microTimeStruct
	customStruct // encoded by its own methods
)

type structType struct {
	kind   int
	fields []jsonField // of a plain struct
}

var structTypes sync.Map // reflect.Type → *structType

func structInfo(t reflect.Type) *structType {
	if v, ok := structTypes.Load(t); ok {
		return v.(*structType)
	}
	info := &structType{}
	switch {
	case t == timeType:
		info.kind = timeStruct
	case t == microTimeType:
		info.kind = microTimeStruct
	case customJSON(t):
		info.kind = customStruct
	default:
		for i := range t.NumField() {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			switch {
			case !sf.IsExported() || name == "-":
				continue
			case t == objectMetaType && name == "managedFields":
				// Compared as entries by ownedUpdate.
				continue
			case name == "" && sf.Anonymous && indirect(sf.Type).Kind() == reflect.Struct:
				info.fields = append(info.fields, jsonField{index: i, inline: true})
				continue
			case name == "":
				name = sf.Name
			}
			info.fields = append(info.fields, jsonField{index: i, name: name})
		}
	}
	structTypes.Store(t, info)
	return info
}

func indirect(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

// typesEveryField: res's schema types an object with every field the
// differ may compare set (every struct field reached without passing a
// list or map), so that the FieldManager's typed conversion cannot fail on
// an object ownedUpdate answers for — it would keep the old managedFields.
func typesEveryField(tc managedfields.TypeConverter, res *api.Resource) bool {
	obj := res.New()
	fill(reflect.ValueOf(obj).Elem(), map[reflect.Type]bool{})
	obj.GetObjectKind().SetGroupVersionKind(res.GVK())
	_, err := tc.ObjectToTyped(obj, typed.AllowDuplicates)
	return err == nil
}

// fill sets every scalar reachable through structs and pointers to a
// value that is not its zero (a recursive type once).
func fill(v reflect.Value, seen map[reflect.Type]bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if seen[v.Type().Elem()] {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seen)
	case reflect.Struct:
		switch info := structInfo(v.Type()); info.kind {
		case timeStruct:
			v.Set(reflect.ValueOf(metav1.Unix(1, 0)))
		case microTimeStruct:
			v.Set(reflect.ValueOf(metav1.NewMicroTime(time.Unix(1, 1000))))
		case plainStruct:
			seen[v.Type()] = true
			for _, f := range info.fields {
				fill(v.Field(f.index), seen)
			}
			delete(seen, v.Type())
		}
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	}
}
