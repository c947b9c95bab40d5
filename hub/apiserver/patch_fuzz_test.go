package apiserver

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
)

// FuzzPatch applies arbitrary patch bodies, as each patch type, to an
// object of each resource, through what every PATCH goes through
// (newPatcher, then decodeBody). It must answer with an object or an
// error, never panic, and never produce a result over the bound (the
// copy and result limits hold whatever the patch).
func FuzzPatch(f *testing.F) {
	f.Add([]byte(`{"metadata":{"labels":{"a":"b"}},"data":{"k":null}}`), uint8(0), uint8(0))
	f.Add([]byte(`[{"op":"add","path":"/metadata/finalizers","value":["xxxxxxxxxxxxxxxx"]},{"op":"copy","from":"/metadata/finalizers","path":"/metadata/finalizers/-"},{"op":"copy","from":"/metadata/finalizers","path":"/metadata/finalizers/-"}]`), uint8(1), uint8(1))
	f.Add([]byte(`[{"op":"test","path":"/metadata/name","value":"x"},{"op":"move","from":"/metadata/labels","path":"/metadata/annotations"},{"op":"remove","path":"/metadata/annotations"}]`), uint8(1), uint8(2))
	f.Add([]byte(`{"spec":{"containers":[{"name":"c","image":"i"},{"$patch":"delete","name":"d"}],"$setElementOrder/containers":[{"name":"c"}]}}`), uint8(2), uint8(3))
	f.Add([]byte(`{"metadata":{"$deleteFromPrimitiveList/finalizers":["a"],"finalizers":["b"]},"$retainKeys":["metadata"]}`), uint8(2), uint8(0))
	f.Add([]byte(`[{"op":"add","path":"/spec/pad","value":"zzzz"},{"op":"copy","from":"/spec","path":"/spec/a"},{"op":"copy","from":"/spec","path":"/spec/b"}]`), uint8(1), uint8(4))
	types := []string{"application/merge-patch+json", "application/json-patch+json", "application/strategic-merge-patch+json"}
	resources := api.Resources()
	cur := make([][]byte, len(resources))
	for i, res := range resources {
		obj := res.New()
		m := obj.(metav1.Object)
		m.SetName("x")
		if res.Namespaced {
			m.SetNamespace("default")
		}
		m.SetLabels(map[string]string{"app": "web"})
		m.SetFinalizers([]string{"a"})
		if p, ok := obj.(*corev1.Pod); ok {
			p.Spec.Containers = []corev1.Container{{Name: "c", Image: "i"}, {Name: "d", Image: "j"}}
		}
		data, err := encodeObject(res, obj)
		if err != nil {
			f.Fatal(err)
		}
		cur[i] = data
	}
	f.Fuzz(func(t *testing.T, body []byte, ct, ri uint8) {
		i := int(ri) % len(resources)
		res := resources[i]
		apply, err := newPatcher(res, types[int(ct)%len(types)], body)
		if err != nil {
			return
		}
		out, err := apply(cur[i])
		if err != nil {
			return
		}
		if len(out) > maxPatchResultBytes {
			t.Fatalf("a %d-byte patch made a %d-byte result", len(body), len(out))
		}
		if !json.Valid(out) {
			t.Fatalf("the patch made invalid JSON: %q", out)
		}
		obj, _, err := decodeBody(res, out, validationStrict)
		if err == nil && obj == nil {
			t.Fatal("decodeBody returned neither an object nor an error")
		}
		var _ runtime.Object = obj
	})
}
