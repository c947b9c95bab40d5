package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/printers"
)

// Format is a parsed -o value.
type Format struct {
	// Kind is "" (table), "wide", "yaml", "json", "name" or "jsonpath".
	Kind string
	// Template is the JSONPath template of "jsonpath=...".
	Template string
	// ShowManagedFields keeps metadata.managedFields in YAML, JSON and
	// JSONPath output; like kubectl, they are left out by default: they
	// are long and say who set what, not what is.
	ShowManagedFields bool
	jp                *jsonpath.JSONPath
}

// Parse reads an -o value.
func Parse(s string) (Format, error) {
	switch s {
	case "", "wide", "yaml", "json", "name":
		return Format{Kind: s}, nil
	}
	if tmpl, ok := strings.CutPrefix(s, "jsonpath="); ok {
		if tmpl == "" {
			return Format{}, fmt.Errorf("-o jsonpath= needs a template, e.g. -o jsonpath='{.items[*].metadata.name}'")
		}
		jp := jsonpath.New("output")
		if err := jp.Parse(tmpl); err != nil {
			return Format{}, fmt.Errorf("error parsing jsonpath %s: %w", tmpl, err)
		}
		return Format{Kind: "jsonpath", Template: tmpl, jp: jp}, nil
	}
	return Format{}, fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: json,jsonpath,name,wide,yaml", s)
}

// IsTable says whether the format is a human-readable table.
func (f Format) IsTable() bool { return f.Kind == "" || f.Kind == "wide" }

// TableOptions say how a table is printed.
type TableOptions struct {
	// Now is the reference time of AGE columns (zero: time.Now()).
	Now           time.Time
	NoHeaders     bool
	WithNamespace bool
	ShowLabels    bool
}

// Print writes obj (an object or a list) in format f. A list prints as a
// kubectl "List" in YAML, JSON and JSONPath.
func (f Format) Print(w io.Writer, obj runtime.Object, topts TableOptions) error {
	switch f.Kind {
	case "", "wide":
		t, err := printers.Table(obj, printers.Options{Wide: f.Kind == "wide", Now: topts.Now, IncludeObject: metav1.IncludeMetadata})
		if err != nil {
			return err
		}
		return printers.PrintTable(w, t, printers.PrintOptions{Wide: f.Kind == "wide", NoHeaders: topts.NoHeaders,
			WithNamespace: topts.WithNamespace, ShowLabels: topts.ShowLabels})
	case "name":
		items, err := Items(obj)
		if err != nil {
			return err
		}
		for _, it := range items {
			n, err := Name(it)
			if err != nil {
				return err
			}
			fmt.Fprintln(w, n)
		}
		return nil
	}
	data, err := ToMap(obj)
	if err != nil {
		return err
	}
	if !f.ShowManagedFields {
		omitManagedFields(data)
	}
	switch f.Kind {
	case "json":
		b, err := json.MarshalIndent(data, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(data)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "jsonpath":
		var buf bytes.Buffer
		if err := f.jp.Execute(&buf, data); err != nil {
			return fmt.Errorf("error executing jsonpath %q: %w", f.Template, err)
		}
		_, err := w.Write(buf.Bytes())
		return err
	}
	return fmt.Errorf("unknown output format %q", f.Kind)
}

// Items returns the objects of a list, or the object itself.
func Items(obj runtime.Object) ([]runtime.Object, error) {
	if meta.IsListType(obj) {
		return meta.ExtractList(obj)
	}
	return []runtime.Object{obj}, nil
}

// ToMap converts an object (with apiVersion and kind filled in) or a list
// (as a kubectl "List") to its JSON shape.
func ToMap(obj runtime.Object) (map[string]any, error) {
	if !meta.IsListType(obj) {
		return objectMap(obj)
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, err
	}
	list := []any{}
	for _, it := range items {
		m, err := objectMap(it)
		if err != nil {
			return nil, err
		}
		list = append(list, m)
	}
	rv := ""
	if lm, err := meta.ListAccessor(obj); err == nil {
		rv = lm.GetResourceVersion()
	}
	return map[string]any{"apiVersion": "v1", "kind": "List", "items": list, "metadata": map[string]any{"resourceVersion": rv}}, nil
}

// omitManagedFields drops metadata.managedFields from an object's map, or
// from each item of a list's.
func omitManagedFields(m map[string]any) {
	if items, ok := m["items"].([]any); ok && m["kind"] == "List" {
		for _, it := range items {
			if im, ok := it.(map[string]any); ok {
				omitManagedFields(im)
			}
		}
		return
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
}

func objectMap(obj runtime.Object) (map[string]any, error) {
	gvk, err := KindOf(obj)
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %s: %w", gvk.Kind, err)
	}
	// Put apiVersion and kind first as kubectl shows them.
	m["apiVersion"], m["kind"] = gvk.GroupVersion().String(), gvk.Kind
	return m, nil
}

// KindOf finds an object's group, version and kind, from its TypeMeta or
// the scheme (typed clients leave TypeMeta empty).
func KindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() && gvk.Kind != "" {
		return gvk, nil
	}
	gvks, _, err := api.Scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("unknown object %T: %w", obj, err)
	}
	return gvks[0], nil
}

// Name is kubectl's "-o name" form: kind[.group]/name, lower case.
func Name(obj runtime.Object) (string, error) {
	gvk, err := KindOf(obj)
	if err != nil {
		return "", err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	return KindGroup(gvk) + "/" + m.GetName(), nil
}

// KindGroup is "kind" for the core group and "kind.group" otherwise, lower
// case, as kubectl prints it in "deployment.apps/web created".
func KindGroup(gvk schema.GroupVersionKind) string {
	k := strings.ToLower(gvk.Kind)
	if gvk.Group != "" {
		k += "." + gvk.Group
	}
	return k
}
