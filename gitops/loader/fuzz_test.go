package loader

import (
	"testing"
	"testing/fstest"
)

// FuzzLoad feeds arbitrary bytes as a YAML and a JSON file: Load must
// return objects or errors, never panic, and every object it returns must
// be one the unstructured machinery can copy.
func FuzzLoad(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n"))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"}} [1]`))
	f.Add([]byte("---\n---\nkey: 2001-12-14t21:59:43.10-05:00\n? [a]\n: b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := fstest.MapFS{"m.yaml": {Data: data}, "m.json": {Data: data}}
		objs, err := Load(fsys, nil)
		if err != nil {
			if _, ok := err.(Errors); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		for _, o := range objs {
			_ = o.Obj.DeepCopy()
			if o.Obj.GetName() == "" || o.Obj.GetKind() == "" {
				t.Fatalf("object without name or kind: %v", o.Obj.Object)
			}
		}
	})
}
