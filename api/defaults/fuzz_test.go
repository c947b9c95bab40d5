package defaults_test

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/defaults"
	"flotilla.dev/flotilla/api/validation"
)

// fuzzDefault decodes data into a fresh object as the apiserver would and
// checks that defaulting never panics, is idempotent, and leaves an object
// that validation can judge without panicking.
func fuzzDefault(f *testing.F, newObj func() runtime.Object, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{}`))
	dec := api.Codecs.UniversalDeserializer()
	f.Fuzz(func(t *testing.T, data []byte) {
		obj := newObj()
		if _, _, err := dec.Decode(data, nil, obj); err != nil {
			return
		}
		defaults.Default(obj)
		again := obj.DeepCopyObject()
		defaults.Default(again)
		if !apiequality.Semantic.DeepEqual(obj, again) {
			a, _ := json.Marshal(obj)
			b, _ := json.Marshal(again)
			t.Fatalf("Default is not idempotent:\n%s\n%s", a, b)
		}
		old := obj.DeepCopyObject()
		defaults.DefaultUpdate(again, old)
		_ = validation.ValidateCreate(obj, validation.Options{})
		_ = validation.ValidateUpdate(again, old, validation.Options{AllowTagImages: true})
	})
}

const podSpecJSON = `{"containers":[{"name":"a","image":"nginx","ports":[{"containerPort":80}],"resources":{"limits":{"cpu":"0.0001"}},` +
	`"livenessProbe":{"httpGet":{"port":80}},"lifecycle":{"preStop":{"httpGet":{"port":"http"}}}}],"volumes":[{"name":"v"},{"name":"p","projected":{"sources":[{"serviceAccountToken":{"path":"t"}},{"downwardAPI":{"items":[{"path":"x","fieldRef":{"fieldPath":"metadata.name"}}]}}]}}],` +
	`"hostNetwork":true,"tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists"}]}`

func FuzzDefaultPod(f *testing.F) {
	fuzzDefault(f, func() runtime.Object { return &corev1.Pod{} },
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default"},"spec":`+podSpecJSON+`}`)
}

func FuzzDefaultDeployment(f *testing.F) {
	fuzzDefault(f, func() runtime.Object { return &appsv1.Deployment{} },
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"default"},"spec":{"selector":{"matchLabels":{"a":"b"}},"strategy":{"rollingUpdate":{"maxSurge":0}},"template":{"metadata":{"labels":{"a":"b"}},"spec":`+podSpecJSON+`}}}`)
}

func FuzzDefaultReplicaSet(f *testing.F) {
	fuzzDefault(f, func() runtime.Object { return &appsv1.ReplicaSet{} },
		`{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"r","namespace":"default"},"spec":{"replicas":3,"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":`+podSpecJSON+`}}}`)
}

func FuzzDefaultDaemonSet(f *testing.F) {
	fuzzDefault(f, func() runtime.Object { return &appsv1.DaemonSet{} },
		`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"ds","namespace":"default"},"spec":{"updateStrategy":{"type":"OnDelete"},"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":`+podSpecJSON+`}}}`)
}

func FuzzDefaultService(f *testing.F) {
	fuzzDefault(f, func() runtime.Object { return &corev1.Service{} },
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"default"},"spec":{"type":"LoadBalancer","clusterIPs":["10.43.0.1","fd00::1"],"sessionAffinity":"ClientIP","ports":[{"port":80,"targetPort":""}]}}`)
}
