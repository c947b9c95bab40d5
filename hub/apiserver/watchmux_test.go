package apiserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/hubtest"
)

// TestWatchesStream: the frames of a multiplexed stream, and the requests
// it refuses as a whole.
func TestWatchesStream(t *testing.T) {
	h := hubtest.Start(t)
	hc, err := rest.HTTPClientFor(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	post := func(method, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, h.URL()+agentapi.PathWatches, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, c := range []struct {
		method, body string
		code         int
	}{
		{"GET", "", http.StatusMethodNotAllowed},
		{"POST", "{", http.StatusBadRequest},
		{"POST", `{"watches":[]}`, http.StatusBadRequest},
		{"POST", `{"watches":[{"id":1,"path":"/api/v1/pods","query":"watch=true"},{"id":1,"path":"/api/v1/nodes","query":"watch=true"}]}`, http.StatusBadRequest},
	} {
		resp := post(c.method, c.body)
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.body, resp.StatusCode, c.code)
		}
	}

	ctx := context.Background()
	cm, err := h.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req := agentapi.WatchesRequest{Watches: []agentapi.WatchRequest{
		{ID: 7, Path: "/api/v1/namespaces/default/configmaps", Query: "watch=true&resourceVersion=1", Accept: "application/json"},
		{ID: 8, Path: "/api/v1/configmaps", Query: "resourceVersion=1"},
		{ID: 9, Path: "/api/v1/nothings", Query: "watch=true"},
	}}
	body, _ := json.Marshal(req)
	resp := post("POST", string(body))
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != agentapi.ContentTypeWatches {
		t.Fatalf("stream answered %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	want := map[uint32]agentapi.FrameKind{7: agentapi.FrameStart, 8: agentapi.FrameRefused, 9: agentapi.FrameRefused}
	for range 3 {
		f, _, err := agentapi.ReadFrame(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want[f.ID] != f.Kind {
			t.Errorf("watch %d: frame kind %d, want %d", f.ID, f.Kind, want[f.ID])
		}
		switch f.ID {
		case 7:
			if string(f.Payload) != "application/json" || f.Flags&agentapi.FlagResumable == 0 || f.Revision != 1 {
				t.Errorf("start of watch 7: %q, flags %d, revision %d", f.Payload, f.Flags, f.Revision)
			}
		case 8, 9:
			var rw agentapi.RefusedWatch
			if err := json.Unmarshal(f.Payload, &rw); err != nil {
				t.Fatal(err)
			}
			if (f.ID == 8 && rw.Code != http.StatusBadRequest) || (f.ID == 9 && rw.Code != http.StatusNotFound) {
				t.Errorf("watch %d refused with %d: %s", f.ID, rw.Code, rw.Body)
			}
		}
	}
	f, _, err := agentapi.ReadFrame(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.ID != 7 || f.Kind != agentapi.FrameEvent || f.Flags&agentapi.FlagResumable == 0 || f.Revision < 2 ||
		!strings.Contains(string(f.Payload), `"ADDED"`) || !strings.Contains(string(f.Payload), cm.Name) {
		t.Errorf("first event: watch %d kind %d flags %d revision %d: %s", f.ID, f.Kind, f.Flags, f.Revision, f.Payload)
	}
}
