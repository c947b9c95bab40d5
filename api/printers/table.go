package printers

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"

	"flotilla.dev/flotilla/api"
)

// Options say how to build a table.
type Options struct {
	// Wide keeps the priority 1 columns. The hub always builds wide tables
	// and lets the client hide what it does not want, as kube-apiserver does.
	Wide bool
	// NoHeaders leaves ColumnDefinitions empty (TableOptions.NoHeaders).
	NoHeaders bool
	// Now is the reference time for AGE columns; zero means time.Now().
	Now time.Time
	// IncludeObject says what each row's Object carries: the whole object
	// (Object), its metadata as a PartialObjectMetadata (Metadata), or
	// nothing (None, also the meaning of "").
	IncludeObject metav1.IncludeObjectPolicy
}

func (o Options) now() time.Time {
	if o.Now.IsZero() {
		return time.Now()
	}
	return o.Now
}

// column is one column definition; cells are produced for every column
// of a kind, and Table drops the wide ones when Wide is false.
type column = metav1.TableColumnDefinition

// kindPrinter knows the columns of one kind and how to fill them.
type kindPrinter struct {
	columns []column
	// cells returns one value per column, in column order.
	cells func(obj runtime.Object, now time.Time) ([]any, error)
}

var byKind = map[schema.GroupVersionKind]*kindPrinter{}

func register(gvk schema.GroupVersionKind, cols []column, cells func(runtime.Object, time.Time) ([]any, error)) {
	byKind[gvk] = &kindPrinter{columns: cols, cells: cells}
}

// defaultPrinter serves kinds without their own columns: the name and age
// are meaningful for every object.
var defaultPrinter = &kindPrinter{
	columns: []column{nameColumn(), ageColumn()},
	cells: func(obj runtime.Object, now time.Time) ([]any, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		return []any{m.GetName(), age(m.GetCreationTimestamp(), now)}, nil
	},
}

// Columns lists every column of a kind (a served kind or its list kind),
// wide ones included with priority 1.
func Columns(gvk schema.GroupVersionKind) []metav1.TableColumnDefinition {
	p := printerFor(itemKind(gvk))
	out := make([]metav1.TableColumnDefinition, len(p.columns))
	copy(out, p.columns)
	return out
}

// ColumnsFor is Columns for a served resource.
func ColumnsFor(r *api.Resource) []metav1.TableColumnDefinition { return Columns(r.GVK()) }

// Table renders a single object or a list as a metav1.Table.
func Table(obj runtime.Object, opts Options) (*metav1.Table, error) {
	obj, gvk, err := typed(obj)
	if err != nil {
		return nil, err
	}
	p := printerFor(itemKind(gvk))
	keep := keptColumns(p.columns, opts.Wide)
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}}
	if !opts.NoHeaders {
		for _, i := range keep {
			t.ColumnDefinitions = append(t.ColumnDefinitions, p.columns[i])
		}
	}
	if meta.IsListType(obj) {
		if lm, err := meta.ListAccessor(obj); err == nil {
			t.ResourceVersion = lm.GetResourceVersion()
			t.Continue = lm.GetContinue()
			t.RemainingItemCount = lm.GetRemainingItemCount()
		}
	} else if m, err := meta.Accessor(obj); err == nil {
		t.ResourceVersion = m.GetResourceVersion()
	}
	rows, err := rows(obj, p, keep, opts)
	if err != nil {
		return nil, err
	}
	t.Rows = rows
	return t, nil
}

// Rows renders a single object or a list as table rows, with the columns
// Columns names (only priority 0 ones unless opts.Wide).
func Rows(obj runtime.Object, opts Options) ([]metav1.TableRow, error) {
	obj, gvk, err := typed(obj)
	if err != nil {
		return nil, err
	}
	p := printerFor(itemKind(gvk))
	return rows(obj, p, keptColumns(p.columns, opts.Wide), opts)
}

func rows(obj runtime.Object, p *kindPrinter, keep []int, opts Options) ([]metav1.TableRow, error) {
	items := []runtime.Object{obj}
	if meta.IsListType(obj) {
		var err error
		if items, err = meta.ExtractList(obj); err != nil {
			return nil, fmt.Errorf("printing %T: %w", obj, err)
		}
	}
	now := opts.now()
	out := make([]metav1.TableRow, 0, len(items))
	for _, item := range items {
		all, err := p.cells(item, now)
		if err != nil {
			return nil, fmt.Errorf("printing %T: %w", item, err)
		}
		if len(all) != len(p.columns) {
			return nil, fmt.Errorf("printing %T: %d cells for %d columns", item, len(all), len(p.columns))
		}
		row := metav1.TableRow{Cells: make([]any, 0, len(keep))}
		for _, i := range keep {
			row.Cells = append(row.Cells, all[i])
		}
		if row.Object, err = rowObject(item, opts.IncludeObject); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

func keptColumns(cols []column, wide bool) []int {
	keep := make([]int, 0, len(cols))
	for i, c := range cols {
		if wide || c.Priority == 0 {
			keep = append(keep, i)
		}
	}
	return keep
}

// rowObject fills a row's Object. The object gets its apiVersion and kind
// set (on a copy) because typed objects from a store or a typed client
// usually carry an empty TypeMeta, and kubectl decodes rows by kind.
func rowObject(item runtime.Object, policy metav1.IncludeObjectPolicy) (runtime.RawExtension, error) {
	switch policy {
	case metav1.IncludeObject:
		cp := item.DeepCopyObject()
		if err := setKind(cp); err != nil {
			return runtime.RawExtension{}, err
		}
		return runtime.RawExtension{Object: cp}, nil
	case metav1.IncludeMetadata:
		m, err := meta.Accessor(item)
		if err != nil {
			return runtime.RawExtension{}, err
		}
		partial := meta.AsPartialObjectMetadata(m)
		partial.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata"))
		return runtime.RawExtension{Object: partial}, nil
	case metav1.IncludeNone, "":
		return runtime.RawExtension{}, nil
	default:
		return runtime.RawExtension{}, fmt.Errorf("includeObject %q: want None, Metadata or Object", policy)
	}
}

func setKind(obj runtime.Object) error {
	if !obj.GetObjectKind().GroupVersionKind().Empty() {
		return nil
	}
	gvks, _, err := api.Scheme.ObjectKinds(obj)
	if err != nil {
		return fmt.Errorf("printing %T: %w", obj, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	return nil
}

// typed turns unstructured objects into the scheme's typed ones so every
// kind has one printer however it was fetched, and finds the object's kind.
func typed(obj runtime.Object) (runtime.Object, schema.GroupVersionKind, error) {
	if obj == nil {
		return nil, schema.GroupVersionKind{}, fmt.Errorf("printing: no object")
	}
	switch u := obj.(type) {
	case *unstructured.Unstructured:
		t, err := fromUnstructured(u.Object, u.GroupVersionKind())
		if err != nil {
			return nil, schema.GroupVersionKind{}, err
		}
		if _, isDefault := t.(*unstructured.Unstructured); isDefault {
			return t, u.GroupVersionKind(), nil
		}
		obj = t
	case *unstructured.UnstructuredList:
		listGVK := u.GroupVersionKind()
		t, err := fromUnstructured(u.UnstructuredContent(), listGVK)
		if err != nil {
			return nil, schema.GroupVersionKind{}, err
		}
		if _, isDefault := t.(*unstructured.UnstructuredList); isDefault {
			if len(u.Items) > 0 {
				return t, u.Items[0].GroupVersionKind(), nil
			}
			return t, listGVK, nil
		}
		obj = t
	}
	gvks, _, err := api.Scheme.ObjectKinds(obj)
	if err != nil {
		if k := obj.GetObjectKind().GroupVersionKind(); !k.Empty() {
			return obj, k, nil
		}
		return nil, schema.GroupVersionKind{}, fmt.Errorf("printing %T: %w", obj, err)
	}
	return obj, gvks[0], nil
}

// fromUnstructured converts to the typed kind when the scheme knows it and
// returns the unstructured object unchanged otherwise (printed with the
// default columns).
func fromUnstructured(content map[string]any, gvk schema.GroupVersionKind) (runtime.Object, error) {
	t, err := api.Scheme.New(gvk)
	if err != nil {
		if strings.HasSuffix(gvk.Kind, "List") {
			l := &unstructured.UnstructuredList{}
			l.SetUnstructuredContent(content)
			return l, nil
		}
		return &unstructured.Unstructured{Object: content}, nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, t); err != nil {
		return nil, fmt.Errorf("printing %s: %w", gvk.Kind, err)
	}
	return t, nil
}

func itemKind(gvk schema.GroupVersionKind) schema.GroupVersionKind {
	if k, ok := strings.CutSuffix(gvk.Kind, "List"); ok {
		if _, known := byKind[gvk.GroupVersion().WithKind(k)]; known {
			gvk.Kind = k
		}
	}
	return gvk
}

func printerFor(gvk schema.GroupVersionKind) *kindPrinter {
	if p, ok := byKind[gvk]; ok {
		return p
	}
	return defaultPrinter
}

// age is how kubectl prints a timestamp in an AGE column.
func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func microAge(t metav1.MicroTime, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func nameColumn() column {
	return column{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]}
}

func ageColumn() column {
	return column{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]}
}
