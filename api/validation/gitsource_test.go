package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/v1alpha1"
)

func validGitSource() *v1alpha1.GitSource {
	return defaulted(&v1alpha1.GitSource{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: "flotilla-system"},
		Spec:       v1alpha1.GitSourceSpec{URL: "https://git.example.com/ops/fleet.git", Paths: []string{"clusters/shops"}},
	})
}

func TestValidateGitSource(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(g *v1alpha1.GitSource)
		want   []want
	}{
		{name: "valid", mutate: func(g *v1alpha1.GitSource) {}},
		{name: "scp-like", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "git@git.example.com:ops/fleet.git" }},
		{name: "ssh", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "ssh://git@git.example.com:2222/ops/fleet.git" }},
		{name: "file", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "file:///srv/git/fleet.git" }},
		{name: "no url", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "" }, want: []want{required("spec.url")}},
		{name: "plain path", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "/srv/git/fleet.git" }, want: []want{invalid("spec.url")}},
		{name: "unsupported scheme", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "ftp://host/fleet.git" }, want: []want{notSupported("spec.url")}},
		{name: "no host", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "https:///fleet.git" }, want: []want{invalid("spec.url")}},
		{name: "no repository path", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "https://git.example.com/" }, want: []want{invalid("spec.url")}},
		{name: "unparseable", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "https://git.example.com:port/x" }, want: []want{invalid("spec.url")}},
		{name: "credentials over http", mutate: func(g *v1alpha1.GitSource) {
			g.Spec.URL = "http://git.local/fleet.git"
			g.Spec.SecretRef = &v1alpha1.LocalObjectReference{Name: "git-creds"}
		}, want: []want{invalid("spec.url"), required("spec.verify")}},
		{name: "http without verification", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "http://git.local/fleet.git" }, want: []want{required("spec.verify")}},
		{name: "git protocol without verification", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "git://git.local/fleet.git" }, want: []want{required("spec.verify")}},
		{name: "http with verification", mutate: func(g *v1alpha1.GitSource) {
			g.Spec.URL = "http://git.local/fleet.git"
			g.Spec.Verify = &v1alpha1.GitVerification{Mode: "head", SecretRef: v1alpha1.LocalObjectReference{Name: "signers"}}
		}},
		{name: "http on loopback", mutate: func(g *v1alpha1.GitSource) { g.Spec.URL = "http://127.0.0.1:8080/fleet.git" }},
		{name: "bad branch", mutate: func(g *v1alpha1.GitSource) { g.Spec.Ref.Branch = "feature..x" }, want: []want{invalid("spec.ref.branch")}},
		{name: "branch as full ref", mutate: func(g *v1alpha1.GitSource) { g.Spec.Ref.Branch = "refs/heads/main" }, want: []want{invalid("spec.ref.branch")}},
		{name: "branch and tag", mutate: func(g *v1alpha1.GitSource) { g.Spec.Ref.Tag = "v1.0" }, want: []want{forbidden("spec.ref.tag")}},
		{name: "branch and commit", mutate: func(g *v1alpha1.GitSource) { g.Spec.Ref.Commit = strings.Repeat("ab", 20) }},
		{name: "short commit", mutate: func(g *v1alpha1.GitSource) { g.Spec.Ref.Commit = "abc123" }, want: []want{invalid("spec.ref.commit")}},
		{name: "no ref", mutate: func(g *v1alpha1.GitSource) { g.Spec.Ref = v1alpha1.GitRef{} }, want: []want{required("spec.ref")}},
		{name: "paths", mutate: func(g *v1alpha1.GitSource) {
			g.Spec.Paths = []string{"clusters/shops", "/etc", "apps/../../secrets", "", "clusters/shops/"}
		}, want: []want{invalid("spec.paths[1]"), invalid("spec.paths[2]"), invalid("spec.paths[3]"), duplicate("spec.paths[4]")}},
		{name: "interval too short", mutate: func(g *v1alpha1.GitSource) { g.Spec.Interval.Duration = 500 * time.Millisecond }, want: []want{invalid("spec.interval")}},
		{name: "no timeout", mutate: func(g *v1alpha1.GitSource) { g.Spec.Timeout = nil }, want: []want{required("spec.timeout")}},
		{name: "secret refs", mutate: func(g *v1alpha1.GitSource) {
			g.Spec.SecretRef = &v1alpha1.LocalObjectReference{}
			g.Spec.WebhookSecretRef = &v1alpha1.LocalObjectReference{Name: "Hook"}
			g.Spec.Verify = &v1alpha1.GitVerification{Mode: "all"}
		}, want: []want{required("spec.secretRef.name"), invalid("spec.webhookSecretRef.name"), notSupported("spec.verify.mode"), required("spec.verify.secretRef.name")}},
		{name: "name is a DNS label", mutate: func(g *v1alpha1.GitSource) { g.Name = "fleet.main" }, want: []want{invalid("metadata.name")}},
		{name: "source label too long", mutate: func(g *v1alpha1.GitSource) { g.Name = strings.Repeat("a", 50) }, want: []want{invalid("metadata.name")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := validGitSource()
			tc.mutate(g)
			expectErrors(t, ValidateCreate(g, Options{}), tc.want...)
		})
	}
}

func TestGitSourceURLCredentialsNeverEchoed(t *testing.T) {
	for _, url := range []string{
		"https://bob:hunter2@git.example.com/fleet.git",
		"https://bob:hunter2@git.example.com:bad/fleet.git",
	} {
		g := validGitSource()
		g.Spec.URL = url
		errs := ValidateCreate(g, Options{})
		expectErrors(t, errs, invalid("spec.url"))
		if strings.Contains(joinErrs(errs), "hunter2") {
			t.Errorf("error for %q shows the password: %s", url, joinErrs(errs))
		}
	}
}

func TestValidateGitSourceStatus(t *testing.T) {
	old := stored(validGitSource())
	g := old.DeepCopy()
	g.Status.History = make([]v1alpha1.Attempt, MaxGitHistory+1)
	g.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: "Maybe", Reason: "Applied", LastTransitionTime: metav1.Now()}}
	expectErrors(t, ValidateStatusUpdate(g, old), tooMany("status.history"), notSupported("status.conditions[0].status"))
}
