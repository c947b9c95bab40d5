package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/internal/testbin"
)

// discoveryHandler serves the legacy discovery documents of the served
// resources: just enough for kubectl to map resource names to kinds. The
// apiserver serves the real ones; this stands in for it here.
func discoveryHandler() http.Handler {
	groups := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	lists := map[string]*metav1.APIResourceList{}
	for _, r := range api.Resources() {
		gv := r.GVR.GroupVersion()
		key := "/" + gvPath(gv)
		list, ok := lists[key]
		if !ok {
			list = &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
			lists[key] = list
			if gv.Group != "" {
				v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
				groups.Groups = append(groups.Groups, metav1.APIGroup{Name: gv.Group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v})
			}
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: r.GVR.Resource, SingularName: r.Singular, Namespaced: r.Namespaced, Kind: r.Kind,
			ShortNames: r.ShortNames, Categories: r.Categories,
			Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"},
		})
	}
	mux := http.NewServeMux()
	serve := func(path string, v any) {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	serve("/api", &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
	serve("/apis", groups)
	for path, list := range lists {
		serve(path, list)
	}
	return mux
}

// kubectlAgainst serves the documents, the stand-in discovery and extra on
// a TLS test server and returns a function that runs kubectl against it.
func kubectlAgainst(t *testing.T, extra func(mux *http.ServeMux)) func(args ...string) (string, error) {
	t.Helper()
	kubectl := testbin.Kubectl(t)
	s, err := New(api.Resources())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Install(mux)
	mux.Handle("/", discoveryHandler())
	if extra != nil {
		extra(mux)
	}
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: hub
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: test}
contexts:
- name: hub
  context: {cluster: hub, user: admin, namespace: default}
current-context: hub
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(dir, "cache")}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
}

// TestKubectlExplain runs the real kubectl against the documents, the way
// people will: explain reads the v3 documents (and v2 when asked). The
// "<[]Container>" form of a field's type only comes from the v3 reader.
func TestKubectlExplain(t *testing.T) {
	run := kubectlAgainst(t, nil)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"explain", "pods.spec.containers"}, []string{"KIND:", "Pod", "image\t<string>", "ports\t<[]ContainerPort>"}},
		{[]string{"explain", "deploy.spec.template.spec"}, []string{"Deployment", "apps", "containers\t<[]Container>", "nodeSelector"}},
		{[]string{"explain", "gitsources.spec"}, []string{"GitSource", "flotilla.dev", "url\t<string>", "Paths inside the repository"}},
		{[]string{"explain", "leases.spec"}, []string{"Lease", "holderIdentity"}},
		{[]string{"explain", "endpointslices"}, []string{"EndpointSlice", "addressType"}},
		{[]string{"explain", "pods.spec", "--output=plaintext-openapiv2"}, []string{"Pod", "containers\t<[]Object>"}},
	} {
		out, err := run(tc.args...)
		if err != nil {
			t.Errorf("kubectl %s: %v\n%s", strings.Join(tc.args, " "), err, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("kubectl %s: output lacks %q:\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
	}
}

// TestKubectlApplyLeavesValidationToServer checks that kubectl apply, with
// its default --validate=strict, finds fieldValidation declared and so
// leaves validation to the server (fieldValidation=Strict) instead of
// validating on its own. The manifest has an unknown field: kubectl's own
// validation would refuse it, so a create reaching the stand-in configmaps
// endpoint proves kubectl trusted the server.
func TestKubectlApplyLeavesValidationToServer(t *testing.T) {
	created := make(chan string, 1)
	run := kubectlAgainst(t, func(mux *http.ServeMux) {
		mux.HandleFunc("GET /api/v1/namespaces/default/configmaps/settings", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(&metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: `configmaps "settings" not found`,
			})
		})
		mux.HandleFunc("POST /api/v1/namespaces/default/configmaps", func(w http.ResponseWriter, r *http.Request) {
			select {
			case created <- r.URL.RawQuery:
			default:
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.Copy(w, r.Body)
		})
	})
	manifest := filepath.Join(t.TempDir(), "cm.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: b\nunknownField: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run("apply", "-f", manifest)
	if err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	select {
	case q := <-created:
		if !strings.Contains(q, "fieldValidation=Strict") {
			t.Errorf("kubectl apply created with query %q, want fieldValidation=Strict", q)
		}
	default:
		t.Fatalf("kubectl apply never created the ConfigMap:\n%s", out)
	}
}
