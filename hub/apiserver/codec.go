package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"flotilla.dev/flotilla/api"
)

var protobufSerializer = protobuf.NewSerializer(api.Scheme, api.Scheme)

const (
	mediaProtobuf       = "application/vnd.kubernetes.protobuf"
	mediaProtobufStream = mediaProtobuf + ";stream=watch"
)

// protobufCapable: the kind has a protobuf encoding (Kubernetes' own kinds
// do; Flotilla's are JSON only).
func protobufCapable(res *api.Resource) bool {
	_, ok := res.New().(interface{ Marshal() ([]byte, error) })
	return ok
}

// encodeProtobuf writes obj in Kubernetes' protobuf envelope as gvk. The
// cache's objects are shared, so obj is copied when its kind must be set.
func encodeProtobuf(gvk schema.GroupVersionKind, obj runtime.Object) ([]byte, error) {
	if obj.GetObjectKind().GroupVersionKind() != gvk {
		obj = obj.DeepCopyObject()
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	// The serializer writes one slice it allocated to the object's size;
	// kept as it is, it has no slack (the cache holds it for every event
	// in its window).
	var out kept
	if err := protobufSerializer.EncodeWithAllocator(obj, &out, &runtime.SimpleAllocator{}); err != nil {
		return nil, fmt.Errorf("encoding %s as protobuf: %w", gvk.Kind, err)
	}
	return out.b, nil
}

// kept is a writer that keeps what it is given.
type kept struct{ b []byte }

func (k *kept) Write(p []byte) (int, error) {
	if k.b == nil {
		k.b = p
	} else {
		k.b = append(k.b, p...)
	}
	return len(p), nil
}

func writeProtobuf(w http.ResponseWriter, code int, data []byte) {
	w.Header().Set("Content-Type", mediaProtobuf)
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// encodeObject writes obj as JSON with its apiVersion and kind set.
func encodeObject(res *api.Resource, obj runtime.Object) ([]byte, error) {
	obj.GetObjectKind().SetGroupVersionKind(res.GVK())
	return json.Marshal(obj)
}

// encodeShared encodes an object decodeStored made, its kind already set,
// in JSON. Unlike encodeObject it writes nothing to the object, which
// other readers may share meanwhile.
func encodeShared(obj runtime.Object) []byte {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(fmt.Sprintf("encoding a %s that was decoded: %v", obj.GetObjectKind().GroupVersionKind().Kind, err))
	}
	return b
}

// decodeStored decodes bytes the hub itself wrote.
func decodeStored(res *api.Resource, data []byte) (runtime.Object, error) {
	obj := res.New()
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, obj); err != nil {
		return nil, fmt.Errorf("decoding stored %s: %w", res.GVR.Resource, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(res.GVK())
	return obj, nil
}

// fieldValidation is the request's fieldValidation directive.
type fieldValidation string

const (
	validationIgnore fieldValidation = "Ignore"
	validationWarn   fieldValidation = "Warn"
	validationStrict fieldValidation = "Strict"
)

func parseFieldValidation(r *http.Request) (fieldValidation, error) {
	switch v := r.URL.Query().Get("fieldValidation"); v {
	case "", "Warn":
		return validationWarn, nil
	case "Ignore":
		return validationIgnore, nil
	case "Strict":
		return validationStrict, nil
	default:
		return "", badRequest("fieldValidation must be one of Ignore, Warn or Strict, not %q", v)
	}
}

// isProtobuf: the request body is in Kubernetes' protobuf encoding.
func isProtobuf(r *http.Request) bool {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return ct == mediaProtobuf
}

// bodyToJSON returns the request body as JSON, converting YAML.
func bodyToJSON(r *http.Request, body []byte) ([]byte, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "", "application/json", "application/merge-patch+json", "application/json-patch+json", "application/strategic-merge-patch+json":
		return body, nil
	case mediaProtobuf:
		// client-go's generated clients send protobuf; the rest of the
		// request path works on JSON.
		obj, _, err := protobufSerializer.Decode(body, nil, nil)
		if err != nil {
			return nil, badRequest("the request body is not a valid protobuf-encoded object: %v", err)
		}
		return json.Marshal(obj)
	case "application/yaml", "application/apply-patch+yaml", "text/yaml":
		j, err := yaml.YAMLToJSON(body)
		if err != nil {
			return nil, badRequest("the request body is not valid YAML: %v", err)
		}
		return j, nil
	default:
		return nil, &apierrors.StatusError{ErrStatus: statusUnsupportedMedia(ct)}
	}
}

// decodeBody decodes a create or update body into a new object of res,
// checking apiVersion and kind and applying the field validation policy.
// It returns warnings for the Warn policy.
func decodeBody(res *api.Resource, data []byte, fv fieldValidation) (runtime.Object, []string, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, nil, badRequest("the request body is empty; send a %s object", res.Kind)
	}
	obj := res.New()
	var warnings []string
	if fv == validationIgnore {
		if err := kjson.UnmarshalCaseSensitivePreserveInts(data, obj); err != nil {
			return nil, nil, badRequest("the request body is not a valid %s: %v", res.Kind, err)
		}
	} else {
		strictErrs, err := kjson.UnmarshalStrict(data, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err != nil {
			return nil, nil, badRequest("the request body is not a valid %s: %v", res.Kind, err)
		}
		for _, e := range strictErrs {
			if fv == validationStrict {
				return nil, nil, badRequest("strict decoding error: %v", joinErrs(strictErrs))
			}
			warnings = append(warnings, e.Error())
		}
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind != "" && gvk.Kind != res.Kind {
		return nil, nil, badRequest("the body is a %s, but this is the %s endpoint; send it to its own endpoint or change kind", gvk.Kind, res.GVR.Resource)
	}
	if gvk.Kind != "" && gvk.GroupVersion() != res.GVR.GroupVersion() {
		return nil, nil, badRequest("the body's apiVersion %q does not match this endpoint's %q", gvk.GroupVersion().String(), res.GVR.GroupVersion().String())
	}
	obj.GetObjectKind().SetGroupVersionKind(res.GVK())
	if _, err := meta.Accessor(obj); err != nil {
		return nil, nil, badRequest("the body has no object metadata: %v", err)
	}
	return obj, warnings, nil
}

func joinErrs(errs []error) string {
	var b strings.Builder
	for i, e := range errs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	writeRaw(w, code, data)
}

func writeRaw(w http.ResponseWriter, code int, data []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}
