package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/printers"
)

// outputKind is what the client asked to receive.
type outputKind int

const (
	outputObject outputKind = iota
	outputTable
	outputMetadata
	// outputProtobuf: the object in Kubernetes' protobuf encoding, as
	// client-go's typed clients ask for it (the agents' do): smaller than
	// JSON, and much cheaper to decode on a device.
	outputProtobuf
)

// negotiate reads the Accept header the way kube-apiserver does: the first
// acceptable entry wins; tables and partial metadata are asked for with
// the as=, g= and v= parameters. Protobuf is served for the kinds that have
// an encoding in it (Kubernetes' own; not Flotilla's, as kube-apiserver
// serves custom resources in JSON only), and skipped for the others.
func negotiate(r *http.Request, res *api.Resource) (outputKind, error) {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return outputObject, nil
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		if mt == mediaProtobuf && params["as"] == "" && protobufCapable(res) {
			return outputProtobuf, nil
		}
		if mt != "application/json" && mt != "*/*" && mt != "application/*" && mt != "application/yaml" {
			continue
		}
		switch params["as"] {
		case "":
			return outputObject, nil
		case "Table":
			if params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1") {
				return outputTable, nil
			}
		case "PartialObjectMetadata", "PartialObjectMetadataList":
			if params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1") {
				return outputMetadata, nil
			}
		}
	}
	return 0, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotAcceptable, Reason: metav1.StatusReasonNotAcceptable,
		Message: fmt.Sprintf("only application/json (optionally as=Table or as=PartialObjectMetadata of meta.k8s.io/v1), and %s for Kubernetes' own kinds, are served, not %q", mediaProtobuf, accept)}}
}

func tableOptions(r *http.Request) printers.Options {
	opts := printers.Options{Wide: true, IncludeObject: metav1.IncludeMetadata}
	if v := r.URL.Query().Get("includeObject"); v != "" {
		opts.IncludeObject = metav1.IncludeObjectPolicy(v)
	}
	return opts
}

func (s *Server) writeObject(w http.ResponseWriter, r *http.Request, res *api.Resource, code int, obj runtime.Object, raw []byte) error {
	return s.writeObjectWith(w, r, res, code, obj, func() []byte {
		if raw == nil {
			return mustEncode(res, obj)
		}
		return raw
	})
}

// writeObjectWith is writeObject with the object's JSON made only if the
// answer is JSON.
func (s *Server) writeObjectWith(w http.ResponseWriter, r *http.Request, res *api.Resource, code int, obj runtime.Object, jsonOf func() []byte) error {
	out, err := negotiate(r, res)
	if err != nil {
		return err
	}
	s.podSecurityWarnings(w, r, obj)
	switch out {
	case outputTable:
		t, err := printers.Table(obj, tableOptions(r))
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		writeJSON(w, code, t)
	case outputMetadata:
		writeJSON(w, code, partialMetadata(res, obj))
	case outputProtobuf:
		data, err := encodeProtobuf(res.GVK(), obj)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		writeProtobuf(w, code, data)
	default:
		writeRaw(w, code, jsonOf())
	}
	return nil
}

func partialMetadata(res *api.Resource, obj runtime.Object) *metav1.PartialObjectMetadata {
	pm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}}
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if om, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			pm.ObjectMeta = *om.DeepCopy()
		}
	}
	return pm
}

func (s *Server) writeList(w http.ResponseWriter, r *http.Request, res *api.Resource, p listPage) error {
	out, err := negotiate(r, res)
	if err != nil {
		return err
	}
	objs := p.objs
	rv := strconv.FormatInt(p.rev, 10)
	var remaining *int64
	if p.next != "" {
		remaining = &p.remaining
	}
	typedList := func() (runtime.Object, error) {
		list := res.NewList()
		items := make([]runtime.Object, len(objs))
		for i, co := range objs {
			items[i] = co.obj
		}
		if err := meta.SetList(list, items); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		lm, _ := meta.ListAccessor(list)
		lm.SetResourceVersion(rv)
		lm.SetContinue(p.next)
		lm.SetRemainingItemCount(remaining)
		return list, nil
	}
	switch out {
	case outputProtobuf:
		list, err := typedList()
		if err != nil {
			return err
		}
		data, err := encodeProtobuf(res.GVR.GroupVersion().WithKind(res.ListKind), list)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		writeProtobuf(w, http.StatusOK, data)
	case outputTable:
		list, err := typedList()
		if err != nil {
			return err
		}
		t, err := printers.Table(list, tableOptions(r))
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		writeJSON(w, http.StatusOK, t)
	case outputMetadata:
		pl := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"}}
		pl.ResourceVersion, pl.Continue, pl.RemainingItemCount = rv, p.next, remaining
		for _, co := range objs {
			pl.Items = append(pl.Items, *partialMetadata(res, co.obj))
		}
		writeJSON(w, http.StatusOK, pl)
	default:
		// Items are already encoded: the list is assembled, not re-encoded.
		var b bytes.Buffer
		size := 128
		for _, co := range objs {
			size += len(co.json()) + 1
		}
		b.Grow(size)
		head, _ := json.Marshal(map[string]any{"kind": res.ListKind, "apiVersion": res.GVR.GroupVersion().String()})
		b.Write(head[:len(head)-1])
		lm, _ := json.Marshal(metav1.ListMeta{ResourceVersion: rv, Continue: p.next, RemainingItemCount: remaining})
		b.WriteString(`,"metadata":`)
		b.Write(lm)
		b.WriteString(`,"items":[`)
		for i, co := range objs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(co.json())
		}
		b.WriteString("]}")
		writeRaw(w, http.StatusOK, b.Bytes())
	}
	return nil
}
