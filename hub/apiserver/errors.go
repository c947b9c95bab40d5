package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/store"
)

// toStatusError maps any error from the request path to the Kubernetes
// Status it should answer with. This is the one place where error kinds
// become HTTP codes.
func toStatusError(err error, res *api.Resource, name string) *apierrors.StatusError {
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		return se
	}
	gr := schema.GroupResource{}
	if res != nil {
		gr = res.GVR.GroupResource()
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return apierrors.NewNotFound(gr, name)
	case errors.Is(err, store.ErrExists):
		return apierrors.NewAlreadyExists(gr, name)
	case errors.Is(err, store.ErrConflict):
		return apierrors.NewConflict(gr, name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	case errors.Is(err, store.ErrCompacted):
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %v", err))
	case errors.Is(err, context.DeadlineExceeded):
		return apierrors.NewTimeoutError("the request did not finish in time", 1)
	case errors.Is(err, context.Canceled):
		return apierrors.NewTimeoutError("the request was canceled", 1)
	}
	return apierrors.NewInternalError(err)
}

func notFoundPath(r *http.Request) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("the server could not find the requested resource (%s %s)", r.Method, r.URL.Path),
	}}
}

func methodNotAllowed(res *api.Resource, method string) error {
	return apierrors.NewMethodNotSupported(res.GVR.GroupResource(), method)
}

func badRequest(format string, args ...any) error {
	return apierrors.NewBadRequest(fmt.Sprintf(format, args...))
}

// writeError answers with a metav1.Status. Internal errors are logged with
// the request; their text goes to the client too, since it names the
// object and the failing step.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error, ri *requestInfo) {
	var res *api.Resource
	name := ""
	if ri != nil {
		res, name = ri.Resource, ri.Name
	}
	se := toStatusError(err, res, name)
	st := se.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	if st.Code >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	writeJSON(w, int(st.Code), &st)
}
