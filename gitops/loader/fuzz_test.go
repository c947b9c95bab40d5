package loader

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
)

// FuzzLoad feeds arbitrary bytes as a YAML and a JSON file: Load must
// return objects or errors, never panic, and every object it returns must
// be one the unstructured machinery can copy.
func FuzzLoad(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n"))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"}} [1]`))
	f.Add([]byte("---\n---\nkey: 2001-12-14t21:59:43.10-05:00\n? [a]\n: b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := fstest.MapFS{"m.yaml": {Data: data}, "m.json": {Data: data}}
		objs, err := Load(fsys, nil)
		if err != nil {
			if _, ok := err.(Errors); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		for _, o := range objs {
			_ = o.Obj.DeepCopy()
			if o.Obj.GetName() == "" || o.Obj.GetKind() == "" {
				t.Fatalf("object without name or kind: %v", o.Obj.Object)
			}
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzKustomizationStaysLocal puts arbitrary text in every field of a
// kustomization that names a file or a base: whatever the text, building
// it never reaches the network — no HTTP request (kustomize fetches URLs
// with the default transport) and no git (it clones remote bases with the
// git binary, found on PATH).
func FuzzKustomizationStaysLocal(f *testing.F) {
	for _, s := range []string{
		"https://example.com/cm.yaml", "http://10.0.0.1/x", "github.com/org/repo//deploy?ref=v1", "git@example.com:org/repo",
		"example.com/org/repo//path", "dev.azure.com/org/_git/repo", "ssh://git@example.com/repo", "file.yaml", "base",
		"../outside", "k=https://example.com/v", "https://example.com/cm.yaml ", "HTTPS://EXAMPLE.COM/A", "//example.com/x",
		"file:///etc/passwd", "s3://bucket/key", "git::https://example.com/repo", "example.com:443/org/repo.git",
	} {
		f.Add(s)
	}
	var fetched atomic.Int64
	prev := http.DefaultTransport
	http.DefaultTransport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		fetched.Add(1)
		return nil, fmt.Errorf("test: %s would reach the network", r.URL)
	})
	f.Cleanup(func() { http.DefaultTransport = prev })
	bin := f.TempDir()
	marker := filepath.Join(bin, "git-ran")
	if err := os.WriteFile(filepath.Join(bin, "git"), []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755); err != nil {
		f.Fatal(err)
	}
	oldPath := os.Getenv("PATH")
	os.Setenv("PATH", bin)
	f.Cleanup(func() { os.Setenv("PATH", oldPath) })

	f.Fuzz(func(t *testing.T, ref string) {
		q, _ := json.Marshal(ref)
		fields := []string{
			"resources: [%s]", "components: [%s]", "bases: [%s]", "crds: [%s]", "configurations: [%s]",
			"generators: [%s]", "transformers: [%s]", "validators: [%s]", "patchesStrategicMerge: [%s]",
			"patches: [{path: %s}]", "patchesJson6902: [{path: %s, target: {kind: ConfigMap, name: a}}]",
			"replacements: [{path: %s}]", "openapi: {path: %s}",
			"configMapGenerator: [{name: g, files: [%s]}]", "configMapGenerator: [{name: g, envs: [%s]}]",
			"secretGenerator: [{name: g, files: [%s]}]", "configMapGenerator: [{name: g, env: %s}]",
		}
		for _, field := range fields {
			k := "resources: [file.yaml]\n" + fmt.Sprintf(field, q) + "\n"
			if strings.HasPrefix(field, "resources:") {
				k = fmt.Sprintf(field, q) + "\n"
			}
			fsys := fstest.MapFS{
				"kustomization.yaml":      {Data: []byte(k)},
				"file.yaml":               {Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")},
				"base/kustomization.yaml": {Data: []byte("resources: [../file.yaml]\n")},
			}
			before := fetched.Load()
			_, _ = Load(fsys, nil)
			if n := fetched.Load() - before; n > 0 {
				t.Fatalf("kustomization %q made %d HTTP requests", k, n)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("kustomization %q ran git", k)
			}
		}
	})
}
