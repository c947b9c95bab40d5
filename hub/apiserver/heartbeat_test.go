package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// A rollout's writes fill the mutating requests in flight; a device's
// Lease renewal and its Node's status still pass, from a pool of their
// own. A refused request is told to come back in 1 to 3 s, drawn for
// each answer.
func TestHeartbeatsHaveSlotsOfTheirOwn(t *testing.T) {
	s := &Server{limits: newLimiters(Limits{MaxMutatingInFlight: 1, MaxHeartbeatsInFlight: 1}, time.Now)}
	node := &UserInfo{Name: "system:node:dev-1", Groups: []string{GroupNodes}}
	take := func(user *UserInfo, path string) (*requestRecord, *httptest.ResponseRecorder) {
		t.Helper()
		r := httptest.NewRequest(http.MethodPut, path, nil)
		ri, isResource, err := parseRequest(r)
		if err != nil || !isResource {
			t.Fatalf("%s: %v", path, err)
		}
		rr, w := &requestRecord{user: user}, httptest.NewRecorder()
		if !s.takeSlot(w, r, rr, &ri, isResource) {
			return nil, w
		}
		return rr, w
	}
	refused := func(user *UserInfo, path string) {
		t.Helper()
		rr, w := take(user, path)
		if rr != nil {
			rr.slot.release()
			t.Fatalf("%s by %s took a slot; want 429", path, user.Name)
		}
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("%s by %s: %d, want 429", path, user.Name, w.Code)
		}
	}
	const (
		podStatus  = "/api/v1/namespaces/default/pods/p/status"
		lease      = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/dev-1"
		nodeStatus = "/api/v1/nodes/dev-1/status"
	)

	rollout, _ := take(node, podStatus)
	if rollout == nil {
		t.Fatal("the first pod status write was refused")
	}
	refused(node, podStatus)

	renewal, _ := take(node, lease)
	if renewal == nil {
		t.Fatal("a device's Lease renewal was refused while pod status writes fill the mutating pool")
	}
	refused(node, nodeStatus) // the heartbeats' pool (of one here) is full
	renewal.slot.release()
	ready, _ := take(node, nodeStatus)
	if ready == nil {
		t.Fatal("a device's Node status was refused while pod status writes fill the mutating pool")
	}
	ready.slot.release()

	// A Lease elsewhere, or a node Lease written by anyone but a device,
	// is an ordinary write.
	refused(node, "/apis/coordination.k8s.io/v1/namespaces/default/leases/dev-1")
	refused(&UserInfo{Name: "ops"}, lease)

	seen := map[int]bool{}
	for range 200 {
		_, w := take(node, podStatus)
		n, err := strconv.Atoi(w.Header().Get("Retry-After"))
		if err != nil || n < 1 || n > 3 {
			t.Fatalf("Retry-After %q, want 1 to 3", w.Header().Get("Retry-After"))
		}
		seen[n] = true
	}
	if len(seen) != 3 {
		t.Errorf("200 refusals were told %v only, want 1, 2 and 3 s", seen)
	}
	rollout.slot.release()
	if again, _ := take(node, podStatus); again == nil {
		t.Error("the mutating slot was not given back")
	}
}
