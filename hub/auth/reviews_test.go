package auth_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/auth"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/pki"
	"flotilla.dev/flotilla/internal/testbin"
)

// TestKubectlAuth: kubectl auth can-i (also --list) and auth whoami tell
// an admin, a viewer and a device what the hub's own authorizer decides
// for them.
func TestKubectlAuth(t *testing.T) {
	kubectl := testbin.Kubectl(t)
	h := hubtest.Start(t)
	dir := t.TempDir()
	kubeconfig := func(user string, groups []string) string {
		cert, key, err := h.PKI().IssueClientCert(user, groups, time.Hour)
		must(t, err)
		path := filepath.Join(dir, strings.ReplaceAll(user, ":", "_")+".kubeconfig")
		must(t, pki.WriteKubeconfig(path, h.URL(), h.PKI().CACertPEM(), cert, key, user))
		return path
	}
	viewer := kubeconfig("vera", []string{auth.GroupViewers})
	device := kubeconfig(agentapi.NodeUser("kiosk-1"), []string{agentapi.NodesGroup})
	run := func(kc string, args ...string) (string, int) {
		t.Helper()
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return strings.TrimSpace(string(out)), ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("kubectl %v: %v", args, err)
		}
		return strings.TrimSpace(string(out)), 0
	}
	for _, tc := range []struct {
		who, kc string
		args    []string
		want    string
	}{
		{"admin", h.KubeconfigPath(), []string{"delete", "nodes"}, "yes"},
		{"viewer", viewer, []string{"get", "pods", "-A"}, "yes"},
		{"viewer", viewer, []string{"get", "secrets"}, "no"},
		{"viewer", viewer, []string{"create", "configmaps"}, "no"},
		{"device", device, []string{"update", "leases/kiosk-1", "-n", "kube-node-lease"}, "yes"},
		{"device", device, []string{"update", "leases/other", "-n", "kube-node-lease"}, "no"},
		{"device", device, []string{"get", "secrets/db"}, "no"},
	} {
		out, code := run(tc.kc, append([]string{"auth", "can-i"}, tc.args...)...)
		// The answer is the last line (kubectl may warn before it).
		lines := strings.Split(out, "\n")
		if !strings.HasPrefix(lines[len(lines)-1], tc.want) || (code == 0) != (tc.want == "yes") {
			t.Errorf("%s: kubectl auth can-i %s = %q (exit %d), want %s", tc.who, strings.Join(tc.args, " "), out, code, tc.want)
		}
	}
	for _, tc := range []struct{ who, kc, user, group string }{
		{"admin", h.KubeconfigPath(), pki.AdminUser, auth.GroupAdmins},
		{"viewer", viewer, "vera", auth.GroupViewers},
		{"device", device, "system:node:kiosk-1", agentapi.NodesGroup},
	} {
		out, code := run(tc.kc, "auth", "whoami")
		if code != 0 || !strings.Contains(out, tc.user) || !strings.Contains(out, tc.group) {
			t.Errorf("%s: kubectl auth whoami = %q (exit %d), want %s in %s", tc.who, out, code, tc.user, tc.group)
		}
	}

	// kubectl auth can-i --list: the rules as the authorizer has them.
	if out, code := run(viewer, "auth", "can-i", "--list"); code != 0 || !strings.Contains(out, "deployments.apps") || strings.Contains(out, "secrets ") ||
		!strings.Contains(out, "[get list watch]") {
		t.Errorf("viewer: kubectl auth can-i --list (exit %d):\n%s", code, out)
	}
	if out, code := run(device, "auth", "can-i", "--list", "-n", "kube-node-lease"); code != 0 || !strings.Contains(out, "leases.coordination.k8s.io") ||
		!strings.Contains(out, "[kiosk-1]") || !strings.Contains(out, "/join/v1/renew") {
		t.Errorf("device: kubectl auth can-i --list -n kube-node-lease (exit %d):\n%s", code, out)
	}
	if out, code := run(h.KubeconfigPath(), "auth", "can-i", "--list"); code != 0 || !strings.Contains(out, "*.*") {
		t.Errorf("admin: kubectl auth can-i --list (exit %d):\n%s", code, out)
	}

	// client-go over protobuf, with the reason the authorizer gave.
	cert, key, err := h.PKI().IssueClientCert("vera", []string{auth.GroupViewers}, time.Hour)
	must(t, err)
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: h.URL(), ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"},
		TLSClientConfig: rest.TLSClientConfig{CAData: h.PKI().CACertPEM(), CertData: cert, KeyData: key}})
	rev, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "default"}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rev.Status.Allowed || !strings.Contains(rev.Status.Reason, "Secret") && !strings.Contains(rev.Status.Reason, "secret") {
		t.Errorf("viewer get secrets: allowed %v, reason %q", rev.Status.Allowed, rev.Status.Reason)
	}
}
