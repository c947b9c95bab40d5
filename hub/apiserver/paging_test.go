package apiserver_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"

	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testbin"
)

// TestListPages: limit and continue serve a list in pages that together
// are the state at the first page's resourceVersion, whatever changed in
// between; client-go's pager and kubectl --chunk-size walk them.
func TestListPages(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	cms := h.Client.CoreV1().ConfigMaps("default")
	var want []string
	for i := range 25 {
		name := fmt.Sprintf("cm-%02d", i)
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	first, err := cms.List(ctx, metav1.ListOptions{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Items) != 10 || first.Continue == "" || first.RemainingItemCount == nil || *first.RemainingItemCount != 15 {
		t.Fatalf("first page: %d items, continue %q, remaining %v; want 10, a token, 15", len(first.Items), first.Continue, first.RemainingItemCount)
	}
	// Between pages: one not yet served is deleted, one created, one
	// changed.
	if err := cms.Delete(ctx, "cm-15", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-99"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-20"}, Data: map[string]string{"v": "2"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range first.Items {
		got = append(got, c.Name)
	}
	next := first.Continue
	for next != "" {
		p, err := cms.List(ctx, metav1.ListOptions{Limit: 10, Continue: next})
		if err != nil {
			t.Fatal(err)
		}
		if p.ResourceVersion != first.ResourceVersion {
			t.Errorf("a page at resourceVersion %s, the first at %s", p.ResourceVersion, first.ResourceVersion)
		}
		for _, c := range p.Items {
			got = append(got, c.Name)
			if c.Name == "cm-20" && c.Data["v"] != "1" {
				t.Errorf("cm-20 as changed after the first page: %v", c.Data)
			}
		}
		next = p.Continue
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages = %v, want the state at the first page %v", got, want)
	}
	// A resourceVersion with a token, and a token made up, are refused.
	if _, err := cms.List(ctx, metav1.ListOptions{Limit: 10, Continue: first.Continue, ResourceVersion: "1"}); err == nil {
		t.Error("continue with resourceVersion was accepted")
	}
	if _, err := cms.List(ctx, metav1.ListOptions{Limit: 10, Continue: "bm90LWEtdG9rZW4"}); err == nil || !strings.Contains(err.Error(), "not a token") {
		t.Errorf("a made-up token: err = %v", err)
	}

	// client-go's pager, in pages of 7, sees the current 25.
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) { return cms.List(ctx, opts) })
	p.PageSize = 7
	n := 0
	if err := p.EachListItem(ctx, metav1.ListOptions{}, func(runtime.Object) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 25 {
		t.Errorf("the pager saw %d ConfigMaps, want 25", n)
	}

	// kubectl get in chunks of 4 prints them all, with one header.
	kubectl := testbin.Kubectl(t)
	out, err := exec.Command(kubectl, "--kubeconfig", h.KubeconfigPath(), "get", "configmaps", "--chunk-size", "4").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get --chunk-size 4: %v\n%s", err, out)
	}
	if rows := strings.Count(string(out), "\ncm-"); rows != 25 || strings.Count(string(out), "NAME") != 1 {
		t.Errorf("kubectl get --chunk-size 4 printed %d rows:\n%s", rows, out)
	}
}
