package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/store/boltstore"
)

// cpuTime is the CPU the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type benchAuth struct{}

func (benchAuth) Authenticate(*http.Request) (*UserInfo, error) {
	return &UserInfo{Name: "admin", Groups: []string{GroupAdmins}}, nil
}
func (benchAuth) Authorize(context.Context, Attributes) (bool, string, error) { return true, "", nil }

// BenchmarkLeaseRenewal is one device's Lease renewal through the whole
// handler: a protobuf PUT changing spec.renewTime, answered in protobuf.
func BenchmarkLeaseRenewal(b *testing.B) {
	st, err := boltstore.Open(filepath.Join(b.TempDir(), "state.db"), boltstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	s, err := New(Config{Store: st, Authenticator: benchAuth{}, Authorizer: benchAuth{}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	<-s.Ready()
	res, _ := api.ResourceForKind(coordv1.SchemeGroupVersion.WithKind("Lease"))
	now := metav1.NewMicroTime(time.Now())
	lease := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: api.NamespaceNodeLease},
		Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To("d"), LeaseDurationSeconds: ptr.To(int32(40)), RenewTime: &now}}
	path := "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
	do := func(method, path string, obj runtime.Object) *coordv1.Lease {
		body, err := encodeProtobuf(res.GVK(), obj)
		if err != nil {
			b.Fatal(err)
		}
		r := httptest.NewRequest(method, path, bytes.NewReader(body))
		r.Header.Set("Content-Type", mediaProtobuf)
		r.Header.Set("Accept", mediaProtobuf+",application/json")
		r.Header.Set("User-Agent", "fleetsim/v0.0.0")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code >= 300 {
			b.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
		}
		out, _, err := protobufSerializer.Decode(w.Body.Bytes(), nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		return out.(*coordv1.Lease)
	}
	lease = do("POST", path, lease)
	b.ReportAllocs()
	cpu0 := cpuTime()
	n := 0
	for b.Loop() {
		n++
		t := metav1.NewMicroTime(now.Add(time.Duration(n) * time.Second))
		lease.Spec.RenewTime = &t
		lease = do("PUT", fmt.Sprintf("%s/%s", path, lease.Name), lease)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(n), "cpu-µs/op")
}
