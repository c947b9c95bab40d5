package apiserver_test

import (
	"testing"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/apiserver"
	"flotilla.dev/flotilla/hub/apiserver/openapi"
)

// TestTypeConverterCoversEveryServedKind: server-side apply finds a schema
// for every kind the hub serves, the flotilla.dev ones included, in the
// OpenAPI documents it serves.
func TestTypeConverterCoversEveryServedKind(t *testing.T) {
	docs, err := openapi.New(api.Resources())
	if err != nil {
		t.Fatal(err)
	}
	tc, err := apiserver.TypeConverter(docs)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range api.Resources() {
		obj := res.New()
		obj.GetObjectKind().SetGroupVersionKind(res.GVK())
		if _, err := tc.ObjectToTyped(obj); err != nil {
			t.Errorf("%s: %v", res.GVK(), err)
		}
	}
}
