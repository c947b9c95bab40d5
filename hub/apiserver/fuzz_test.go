package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"flotilla.dev/flotilla/api"
)

// FuzzDecodeBody feeds arbitrary bodies, in every content type the hub
// accepts, to the decoding every create and update goes through. It must
// answer with an object or an error, never panic.
func FuzzDecodeBody(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}}`), uint8(0), uint8(0))
	f.Add([]byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 2}\n"), uint8(1), uint8(7))
	f.Add([]byte(`{"kind":"ConfigMap","data":{"a":1}}`), uint8(0), uint8(4))
	f.Add([]byte(`{"metadata":{"name":"x","name":"y"}}`), uint8(0), uint8(3))
	f.Add([]byte{0x6b, 0x38, 0x73, 0x00, 0x0a, 0x02}, uint8(2), uint8(2))
	types := []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "text/plain", ""}
	resources := api.Resources()
	f.Fuzz(func(t *testing.T, body []byte, ct, res uint8) {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/pods", strings.NewReader(""))
		r.Header.Set("Content-Type", types[int(ct)%len(types)])
		data, err := bodyToJSON(r, body)
		if err != nil {
			return
		}
		for _, fv := range []fieldValidation{validationStrict, validationWarn, validationIgnore} {
			obj, _, err := decodeBody(resources[int(res)%len(resources)], data, fv)
			if err == nil && obj == nil {
				t.Fatal("decodeBody returned neither an object nor an error")
			}
		}
	})
}

// FuzzParseRequest checks that no path or query makes request parsing panic.
func FuzzParseRequest(f *testing.F) {
	f.Add("GET", "/api/v1/namespaces/default/pods/x/status", "watch=true")
	f.Add("POST", "/apis/apps/v1/namespaces/a/deployments", "")
	f.Add("DELETE", "/api/v1/watch/namespaces", "labelSelector=a%3Db")
	f.Fuzz(func(t *testing.T, method, path, query string) {
		r, err := http.NewRequest(method, "https://hub"+path+"?"+query, nil)
		if err != nil {
			return
		}
		ri, ok, err := parseRequest(r)
		if ok && err == nil && ri.Resource == nil {
			t.Fatalf("parsed %s %s as a resource request without a resource", method, path)
		}
	})
}
