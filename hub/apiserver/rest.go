package apiserver

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "sigs.k8s.io/json"
)

func (s *Server) serveResource(w http.ResponseWriter, r *http.Request, ri *requestInfo) {
	var err error
	switch ri.Subresource {
	case "":
		switch ri.Verb {
		case "get":
			err = s.handleGet(w, r, ri)
		case "list":
			err = s.handleList(w, r, ri)
		case "watch":
			err = s.handleWatch(w, r, ri)
		case "create":
			err = s.handleCreate(w, r, ri)
		case "update":
			err = s.handleUpdate(w, r, ri)
		case "patch":
			err = s.handlePatch(w, r, ri)
		case "delete":
			err = s.handleDelete(w, r, ri)
		case "deletecollection":
			err = s.handleDeleteCollection(w, r, ri)
		}
	case "status":
		if !ri.Resource.HasStatus {
			err = notFoundPath(r)
			break
		}
		switch ri.Verb {
		case "get":
			err = s.handleGet(w, r, ri)
		case "update":
			err = s.handleUpdate(w, r, ri)
		case "patch":
			err = s.handlePatch(w, r, ri)
		default:
			err = methodNotAllowed(ri.Resource, r.Method)
		}
	case "scale":
		if !hasScale(ri.Resource.Kind) {
			err = notFoundPath(r)
			break
		}
		err = s.handleScale(w, r, ri)
	case "binding":
		if ri.Resource.Kind != "Pod" || ri.Verb != "create" {
			err = notFoundPath(r)
			break
		}
		err = s.handleBinding(w, r, ri)
	case "log":
		err = s.handlePodLog(w, r, ri)
	case "exec", "attach", "portforward":
		err = s.handlePodStream(w, r, ri)
	default:
		err = notFoundPath(r)
	}
	if err != nil {
		s.writeError(w, r, err, ri)
	}
}

func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, badRequest("reading the request body: %v", err)
	}
	if len(body) > maxBodyBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the request body is larger than %d bytes", maxBodyBytes))
	}
	return body, nil
}

func isDryRun(r *http.Request) (bool, error) {
	vals := r.URL.Query()["dryRun"]
	for _, v := range vals {
		if v != "All" {
			return false, badRequest("dryRun may only be \"All\", not %q", v)
		}
	}
	return len(vals) > 0, nil
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	if err := s.cache.waitFresh(r.Context()); err != nil {
		return err
	}
	co := s.cache.get(ri.Resource, ri.Namespace, ri.Name)
	if co == nil {
		if err := s.cache.readError(ri.Resource, ri.Namespace, ri.Name); err != nil {
			return apierrors.NewInternalError(err)
		}
		return apierrors.NewNotFound(ri.Resource.GVR.GroupResource(), ri.Name)
	}
	return s.writeObjectWith(w, r, ri.Resource, http.StatusOK, co.obj, co.json)
}

func (s *Server) listFilter(r *http.Request, ri *requestInfo) (*filter, error) {
	q := r.URL.Query()
	ls, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		return nil, badRequest("invalid label selector %q: %v", q.Get("labelSelector"), err)
	}
	fs, err := parseFieldSelector(ri.Resource, q.Get("fieldSelector"))
	if err != nil {
		return nil, err
	}
	f := &filter{namespace: ri.Namespace, name: ri.Name, labels: ls, fields: fs}
	// A metadata.name= field selector is how clients get one object as a
	// list; answer it from the index.
	if v, ok := fs.RequiresExactMatch("metadata.name"); ok && f.name == "" {
		f.name = v
	}
	if v, ok := fs.RequiresExactMatch("metadata.namespace"); ok && f.namespace == "" && ri.Resource.Namespaced {
		f.namespace = v
	}
	return f, nil
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	f, err := s.listFilter(r, ri)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := parseLimit(r)
	if err != nil {
		return err
	}
	if c := q.Get("continue"); c != "" {
		if rv := q.Get("resourceVersion"); rv != "" {
			return badRequest("specifying resourceVersion (%q) is not allowed when using continue: the token carries the list's", rv)
		}
		tok, err := decodeContinue(c)
		if err != nil {
			return err
		}
		if tok.RV > 0 {
			// A token from another hub of the fleet, ahead of this one.
			if err := s.waitForResourceVersion(r.Context(), tok.RV); err != nil {
				return err
			}
		}
		objs, rev, err := s.continueList(ri.Resource, f, tok)
		if err != nil {
			return err
		}
		return s.writeList(w, r, ri.Resource, page(objs, rev, limit))
	}
	// resourceVersion "0" means any state is acceptable; otherwise the
	// list must include every write acknowledged so far (or, for an exact
	// revision, at least that one).
	switch rv := q.Get("resourceVersion"); rv {
	case "0":
	case "":
		if err := s.cache.waitFresh(r.Context()); err != nil {
			return err
		}
	default:
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || n < 0 {
			return badRequest("resourceVersion %q is not a valid resource version", rv)
		}
		if err := s.waitForResourceVersion(r.Context(), n); err != nil {
			return err
		}
	}
	objs, rev := s.cache.list(ri.Resource, f)
	return s.writeList(w, r, ri.Resource, page(objs, rev, limit))
}

// readObject decodes the object a create or update sends, under the
// request's field validation, and says whether the request is a dry run.
func readObject(w http.ResponseWriter, r *http.Request, ri *requestInfo) (runtime.Object, bool, error) {
	kind := "UpdateOptions"
	if ri.Verb == "create" {
		kind = "CreateOptions"
	}
	if err := checkFieldManager(r, kind); err != nil {
		return nil, false, err
	}
	body, err := readBody(r)
	if err != nil {
		return nil, false, err
	}
	fv, err := parseFieldValidation(r)
	if err != nil {
		return nil, false, err
	}
	dry, err := isDryRun(r)
	if err != nil {
		return nil, false, err
	}
	data, err := bodyToJSON(r, body)
	if err != nil {
		return nil, false, err
	}
	if isProtobuf(r) {
		// The JSON was just encoded from a typed object: it has no
		// unknown or duplicate fields for a strict decoding to find.
		fv = validationIgnore
	}
	obj, warnings, err := decodeBody(ri.Resource, data, fv)
	if err != nil {
		return nil, false, err
	}
	addWarnings(w, warnings)
	return obj, dry, nil
}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	if ri.Name != "" {
		return methodNotAllowed(ri.Resource, "POST to a named object")
	}
	obj, dry, err := readObject(w, r, ri)
	if err != nil {
		return err
	}
	m, _ := meta.Accessor(obj)
	if ri.Resource.Namespaced {
		switch {
		case m.GetNamespace() == "":
			m.SetNamespace(ri.Namespace)
		case ri.Namespace != "" && m.GetNamespace() != ri.Namespace:
			return badRequest("the namespace of the object (%s) does not match the namespace on the request (%s)", m.GetNamespace(), ri.Namespace)
		}
		if ri.Namespace == "" {
			return badRequest("a namespaced %s must be created under /namespaces/<namespace>/", ri.Resource.Kind)
		}
	} else {
		m.SetNamespace("")
	}
	out, raw, err := s.create(r.Context(), ri.Resource, obj, dry, ownerOf(r))
	if err != nil {
		return err
	}
	return s.writeObject(w, r, ri.Resource, http.StatusCreated, out, raw)
}

func (s *Server) handleUpdate(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	obj, dry, err := readObject(w, r, ri)
	if err != nil {
		return err
	}
	m, _ := meta.Accessor(obj)
	if m.GetName() != ri.Name {
		return badRequest("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), ri.Name)
	}
	if ri.Resource.Namespaced {
		if m.GetNamespace() == "" {
			m.SetNamespace(ri.Namespace)
		} else if m.GetNamespace() != ri.Namespace {
			return badRequest("the namespace of the object (%s) does not match the namespace on the request (%s)", m.GetNamespace(), ri.Namespace)
		}
	}
	wantRV := m.GetResourceVersion()
	out, raw, created, err := s.update(r.Context(), ri.Resource, ri.Namespace, ri.Name, ri.Subresource, dry, ownerOf(r), func(cur runtime.Object) (runtime.Object, error) {
		if wantRV != "" && cur != nil {
			cm, _ := meta.Accessor(cur)
			if cm.GetResourceVersion() != wantRV {
				return nil, conflict(ri, fmt.Sprintf("the object has been modified; please apply your changes to the latest version and try again (you sent resourceVersion %s, the current one is %s)", wantRV, cm.GetResourceVersion()))
			}
		}
		return obj.DeepCopyObject(), nil
	})
	if err != nil {
		return err
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	return s.writeObject(w, r, ri.Resource, code, out, raw)
}

func conflict(ri *requestInfo, msg string) error {
	return apierrors.NewConflict(ri.Resource.GVR.GroupResource(), ri.Name, errors.New(msg))
}

func addWarnings(w http.ResponseWriter, warnings []string) {
	for _, wr := range warnings {
		w.Header().Add("Warning", `299 - `+strconv.Quote(wr))
	}
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	opts, err := deleteOptions(r)
	if err != nil {
		return err
	}
	out, raw, err := s.delete(r.Context(), ri.Resource, ri.Namespace, ri.Name, opts)
	if err != nil {
		return err
	}
	if out == nil {
		writeJSON(w, http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess,
			Details: &metav1.StatusDetails{Name: ri.Name, Group: ri.Resource.GVR.Group, Kind: ri.Resource.GVR.Resource}})
		return nil
	}
	return s.writeObject(w, r, ri.Resource, http.StatusOK, out, raw)
}

func (s *Server) handleDeleteCollection(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	opts, err := deleteOptions(r)
	if err != nil {
		return err
	}
	f, err := s.listFilter(r, ri)
	if err != nil {
		return err
	}
	if err := s.cache.waitFresh(r.Context()); err != nil {
		return err
	}
	objs, _ := s.cache.list(ri.Resource, f)
	var deleted []*cachedObject
	for _, co := range objs {
		m, _ := meta.Accessor(co.obj)
		if _, _, err := s.delete(r.Context(), ri.Resource, m.GetNamespace(), m.GetName(), opts); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		deleted = append(deleted, co)
	}
	return s.writeList(w, r, ri.Resource, listPage{objs: deleted, rev: s.cache.revision()})
}

func deleteOptions(r *http.Request) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		data, err := bodyToJSON(r, body)
		if err != nil {
			return nil, err
		}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(data, opts); err != nil {
			return nil, badRequest("the request body is not valid DeleteOptions: %v", err)
		}
	}
	q := r.URL.Query()
	if v := q.Get("gracePeriodSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, badRequest("gracePeriodSeconds %q is not a number", v)
		}
		opts.GracePeriodSeconds = &n
	}
	if v := q.Get("propagationPolicy"); v != "" {
		p := metav1.DeletionPropagation(v)
		opts.PropagationPolicy = &p
	}
	if v := q.Get("orphanDependents"); v != "" {
		b := isTrue(v)
		opts.OrphanDependents = &b
	}
	if dry, err := isDryRun(r); err != nil {
		return nil, err
	} else if dry {
		opts.DryRun = []string{"All"}
	}
	for _, d := range opts.DryRun {
		if d != "All" {
			return nil, badRequest("dryRun may only be \"All\", not %q", d)
		}
	}
	if opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds < 0 {
		return nil, badRequest("gracePeriodSeconds must not be negative")
	}
	if opts.PropagationPolicy != nil {
		switch *opts.PropagationPolicy {
		case metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan:
		default:
			return nil, badRequest("propagationPolicy must be Orphan, Background or Foreground, not %q", *opts.PropagationPolicy)
		}
	}
	return opts, nil
}
