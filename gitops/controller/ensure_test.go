package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"flotilla.dev/flotilla/api/v1alpha1"
)

func TestRetriable(t *testing.T) {
	gr := gvr.GroupResource()
	goAway := &url.Error{Op: "Put", URL: "https://hub:6443/apis/flotilla.dev/v1alpha1/namespaces/flotilla-system/gitsources/default",
		Err: errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=7, ErrCode=COMPRESSION_ERROR")}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection lost", goAway, true},
		{"connection lost, wrapped", fmt.Errorf("updating the GitSource: %w", goAway), true},
		{"hub starting", apierrors.NewServiceUnavailable("the hub is starting"), true},
		{"too many requests", apierrors.NewTooManyRequests("busy", 1), true},
		{"conflict", apierrors.NewConflict(gr, "default", errors.New("modified")), true},
		{"internal error, wrapped", fmt.Errorf("reading: %w", apierrors.NewInternalError(errors.New("boom"))), true},
		{"invalid", apierrors.NewInvalid(v1alpha1.SchemeGroupVersion.WithKind("GitSource").GroupKind(), "default", field.ErrorList{field.Required(field.NewPath("spec", "url"), "")}), false},
		{"forbidden", apierrors.NewForbidden(gr, "default", errors.New("no")), false},
		{"bad request, wrapped", fmt.Errorf("creating: %w", apierrors.NewBadRequest("no")), false},
		{"connection lost while reading the answer", errors.New("stream error when reading response body, may be caused by closed connection. Please retry"), true},
	} {
		if got := retriable(c.err); got != c.want {
			t.Errorf("%s: retriable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

func fakeDynamic(t *testing.T) *dynamicfake.FakeDynamicClient {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{gvr: "GitSourceList"})
}

func startSource() *v1alpha1.GitSource {
	return &v1alpha1.GitSource{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "GitSource"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "flotilla-system", Name: "default"},
		Spec:       v1alpha1.GitSourceSpec{URL: "file:///srv/fleet.git", Ref: v1alpha1.GitRef{Branch: "main"}},
	}
}

// A hub restarted under its own loops may drop their first requests; the
// source given at start is then written on a later try, and the loop (so
// the hub) does not end.
func TestSourceGivenAtStartOutlastsALostConnection(t *testing.T) {
	dyn := fakeDynamic(t)
	var failed atomic.Int32
	dyn.PrependReactor("get", "gitsources", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed.Add(1) <= 2 {
			return true, nil, &url.Error{Op: "Get", URL: "https://hub:6443/", Err: errors.New("http2: server sent GOAWAY and closed the connection")}
		}
		return false, nil, nil
	})
	var logs strings.Builder
	c := New(Config{DataDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	c.dyn = dyn
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.ensureSourceRetrying(ctx, startSource()); err != nil {
		t.Fatalf("the source given at start: %v", err)
	}
	if _, err := dyn.Resource(gvr).Namespace("flotilla-system").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("the source was not created: %v", err)
	}
	if n := strings.Count(logs.String(), "will retry"); n != 2 {
		t.Errorf("logged %d retries, want 2:\n%s", n, logs.String())
	}
}

// A source the API turns away is an error at once: trying it again
// would be turned away the same way.
func TestSourceGivenAtStartTurnedAway(t *testing.T) {
	dyn := fakeDynamic(t)
	dyn.PrependReactor("create", "gitsources", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(v1alpha1.SchemeGroupVersion.WithKind("GitSource").GroupKind(), "default",
			field.ErrorList{field.Invalid(field.NewPath("spec", "url"), "file:///srv/fleet.git", "not allowed here")})
	})
	c := New(Config{DataDir: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
	c.dyn = dyn
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err := c.ensureSourceRetrying(ctx, startSource())
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want the API's Invalid", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s: a refusal was retried", d)
	}
}
