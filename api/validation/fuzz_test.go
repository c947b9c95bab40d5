package validation

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/defaults"
)

// FuzzValidatePod decodes arbitrary JSON as the apiserver would, defaults
// and validates it. Validation must never panic, and a pod it accepts must
// stay accepted when defaulted again (defaulting is idempotent).
func FuzzValidatePod(f *testing.F) {
	seed, err := json.Marshal(validPod())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x","namespace":"default"},"spec":{"containers":[{"name":"a","image":"nginx","ports":[{"containerPort":80,"hostPort":80},{"containerPort":70000}],"livenessProbe":{"exec":{},"httpGet":{"port":"http"}},"resources":{"limits":{"cpu":"1"},"requests":{"cpu":"2"}}}],"volumes":[{"name":"v","projected":{"sources":[{}]}}],"tolerations":[{"operator":"Exists"}]}}`))
	f.Add([]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"y","namespace":"a","labels":{"-":"-"}},"spec":{"initContainers":[{"name":"i","image":"a@sha256:00","restartPolicy":"Always","env":[{"name":"X","valueFrom":{"fieldRef":{"fieldPath":"metadata.labels['a']"}}}]}],"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"k","operator":"Gt","values":["1"]}]}]}}}}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	dec := api.Codecs.UniversalDeserializer()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &corev1.Pod{}
		if _, _, err := dec.Decode(data, nil, p); err != nil {
			return
		}
		defaults.Default(p)
		for _, opts := range []Options{{}, {AllowTagImages: true}} {
			errs := ValidateCreate(p, opts)
			for _, e := range errs {
				if e.Field == "" {
					t.Fatalf("error without a field path: %v", e)
				}
			}
		}
		old := p.DeepCopy()
		old.ResourceVersion = "1"
		upd := old.DeepCopy()
		_ = ValidateUpdate(upd, old, Options{})
		_ = ValidateStatusUpdate(upd, old)

		again := p.DeepCopy()
		defaults.Default(again)
		if a, b := len(ValidateCreate(p, Options{})), len(ValidateCreate(again, Options{})); a != b {
			t.Fatalf("defaulting twice changed validation: %d errors, then %d", a, b)
		}
	})
}

// FuzzParseImage: the image parser never panics, and whatever it accepts
// as pinned passes the strict policy.
func FuzzParseImage(f *testing.F) {
	for _, s := range []string{image, "nginx:1", "localhost:5000/a/b:c@" + digest, "[::1]/x", "a@b:c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := parseImage(s)
		if err != nil {
			return
		}
		errs := validateImage(s, nil, false)
		pinned := sha256Digest.MatchString(ref.digest)
		if pinned != (len(errs) == 0) {
			t.Fatalf("%q: digest %q pinned=%v but policy errors %v", s, ref.digest, pinned, errs)
		}
	})
}
