package loader

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
)

const cm = `apiVersion: v1
kind: ConfigMap
metadata:
  name: %s
data:
  k: v
`

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func ids(objs []Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.ID())
	}
	return out
}

func TestLoadMultiDocumentAndJSON(t *testing.T) {
	fsys := fstest.MapFS{
		"apps/a.yaml":    file("---\n# comment\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: shop}\n---\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n"),
		"apps/b.json":    file(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"},"data":{"n":"1"}}`),
		"apps/list.yml":  file("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: c}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: d}\n"),
		"apps/README.md": file("# not a manifest"),
		"other/x.yaml":   file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"),
	}
	objs, err := Load(fsys, []string{"apps"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(ids(objs), ",")
	want := "ConfigMap shop/a,Namespace shop,ConfigMap b,ConfigMap c,ConfigMap d"
	if got != want {
		t.Fatalf("objects = %s, want %s", got, want)
	}
	if objs[1].Line != 8 || objs[1].File != "apps/a.yaml" {
		t.Errorf("Namespace at %s:%d, want apps/a.yaml:8", objs[1].File, objs[1].Line)
	}
	if objs[4].Line != 7 {
		t.Errorf("second List item at line %d, want 7", objs[4].Line)
	}
	if n, ok := objs[0].Obj.Object["metadata"].(map[string]any); !ok || n["name"] != "a" {
		t.Errorf("metadata not decoded: %#v", objs[0].Obj.Object)
	}
}

func TestLoadErrorsNameFileAndLine(t *testing.T) {
	fsys := fstest.MapFS{
		"ok.yaml":     file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"),
		"broken.yaml": file("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n   bad: indent\n"),
		"noname.yaml": file("apiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine}\n"),
		"broken.json": file("{\n\"apiVersion\": \"v1\",\n\"kind\": \n}"),
		"scalar.yaml": file("just a string\n"),
		"dupkey.yaml": file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\ndata: {a: 1}\ndata: {b: 2}\n"),
		"label.yaml":  file("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: l\n  labels: {n: 1}\n"),
	}
	_, err := Load(fsys, nil)
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error %v is not Errors", err)
	}
	want := map[string]int{"broken.yaml": 5, "noname.yaml": 1, "broken.json": 4, "scalar.yaml": 1, "dupkey.yaml": 5, "label.yaml": 1}
	got := map[string]int{}
	for _, e := range es {
		got[e.File] = e.Line
	}
	for f, line := range want {
		l, ok := got[f]
		if !ok {
			t.Errorf("no error for %s in %v", f, err)
			continue
		}
		if l != line {
			t.Errorf("%s: error at line %d, want %d (%v)", f, l, line, err)
		}
	}
	if _, ok := got["ok.yaml"]; ok {
		t.Errorf("error for a good file: %v", err)
	}
	if !strings.Contains(err.Error(), "broken.yaml:5") {
		t.Errorf("message %q does not say file:line", err)
	}
}

func TestLoadIgnoreFiles(t *testing.T) {
	fsys := fstest.MapFS{
		".flotillaignore":       file("# drafts\ndrafts/\n*.local.yaml\n"),
		"a.yaml":                file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"),
		"a.local.yaml":          file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: local}\n"),
		"drafts/d.yaml":         file("not: [valid"),
		"sub/.flotillaignore":   file("skip.yaml\n!keep.local.yaml\n"),
		"sub/skip.yaml":         file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: skip}\n"),
		"sub/keep.local.yaml":   file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep}\n"),
		".github/workflow.yaml": file("on: push\n"),
	}
	objs, err := Load(fsys, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(objs), ","); got != "ConfigMap a,ConfigMap keep" {
		t.Fatalf("objects = %s", got)
	}
}

func TestLoadMissingPath(t *testing.T) {
	_, err := Load(fstest.MapFS{"a.yaml": file("")}, []string{"nope"})
	if !errors.Is(err, ErrNoPath) {
		t.Fatalf("err = %v, want ErrNoPath", err)
	}
}

// TestLoadKustomizationAtTheRoot: a repository whose top directory is a
// kustomization (the commonest layout) builds; kustomize was once handed
// "/." for it, which its in-memory file system does not know.
func TestLoadKustomizationAtTheRoot(t *testing.T) {
	fsys := fstest.MapFS{
		"kustomization.yaml": file("namePrefix: shop-\nresources:\n- cm.yaml\n"),
		"cm.yaml":            file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n"),
	}
	for _, paths := range [][]string{nil, {"."}, {"./"}} {
		objs, err := Load(fsys, paths)
		if err != nil {
			t.Fatalf("paths %q: %v", paths, err)
		}
		if len(objs) != 1 || objs[0].ID() != "ConfigMap shop-app" {
			t.Errorf("paths %q: objects = %v", paths, ids(objs))
		}
	}
}

func TestLoadKustomizeOverlay(t *testing.T) {
	fsys := fstest.MapFS{
		"base/kustomization.yaml":            file("resources:\n- cm.yaml\n"),
		"base/cm.yaml":                       file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {color: blue}\n"),
		"overlays/shop/kustomization.yaml":   file("namespace: shop\nnamePrefix: shop-\nresources:\n- ../../base\npatches:\n- path: patch.yaml\n"),
		"overlays/shop/patch.yaml":           file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {color: red}\n"),
		"overlays/shop/ignored-by-kust.yaml": file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stray}\n"),
	}
	objs, err := Load(fsys, []string{"overlays/shop"})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].ID() != "ConfigMap shop/shop-app" {
		t.Fatalf("objects = %v", ids(objs))
	}
	if c, _, _ := unstructuredString(objs[0], "data", "color"); c != "red" {
		t.Errorf("color = %q, want red (the overlay's patch)", c)
	}
	if objs[0].File != "overlays/shop/kustomization.yaml" {
		t.Errorf("file = %s", objs[0].File)
	}
}

func TestLoadKustomizeRefusesRemote(t *testing.T) {
	fsys := fstest.MapFS{
		"k/kustomization.yaml": file("resources:\n- https://github.com/example/repo//deploy?ref=main\n- github.com/example/other\n"),
	}
	_, err := Load(fsys, nil)
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 {
		t.Fatalf("err = %v, want two errors", err)
	}
	if !strings.Contains(es[0].Error(), "not in the commit") {
		t.Errorf("message %q", es[0])
	}
}

func TestLoadYAMLSyntaxErrorLines(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		line int
	}{
		{"a: 1\nb: [unclosed\nc: 2\n", 2},
		{"a: 1\nb: {x: 1\n", 2},
		{"a: 1\n  b: 2\n", 2},
		{"a:\n  - x\n  y: 1\n", 2}, // where the sequence began
		{"a: 1\nb: \"unterminated\n", 2},
	} {
		_, err := Load(fstest.MapFS{"f.yaml": file(tc.doc)}, nil)
		var es Errors
		if !errors.As(err, &es) || len(es) != 1 {
			t.Errorf("%q: err = %v", tc.doc, err)
			continue
		}
		if es[0].Line != tc.line || strings.Contains(es[0].Msg, "line ") {
			t.Errorf("%q: %v, want line %d without a second line number", tc.doc, es[0], tc.line)
		}
	}
}

// Kustomize reaches the network from any field that names a file, not
// only resources: a generator's file source fetched a URL, and its answer
// landed in a ConfigMap. Every such field is refused before kustomize
// runs, and nothing is fetched; URLs that are only data stay allowed.
func TestLoadKustomizeFetchesNothing(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "stolen: true\n")
	}))
	defer srv.Close()
	fsys := fstest.MapFS{
		"k/kustomization.yaml": file(`resources:
- cm.yaml
configMapGenerator:
- name: fetched
  files:
  - data=` + srv.URL + `/secret
  literals:
  - docs=https://docs.example/flotilla
- name: env
  envs: [` + srv.URL + `/env]
patches:
- path: ` + srv.URL + `/patch.yaml
transformers:
- github.com/example/transformers//labels?ref=v1
crds: [` + srv.URL + `/crd.yaml]
openapi: {path: ` + srv.URL + `/schema.json}
helmCharts:
- {name: app, repo: ` + srv.URL + `}
commonAnnotations:
  homepage: https://shop.example
`),
		"k/cm.yaml": file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n"),
	}
	_, err := Load(fsys, nil)
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v, want the remote fields refused", err)
	}
	text := err.Error()
	for _, want := range []string{"configMapGenerator[0].files", "configMapGenerator[1].envs", "patches[0].path", "transformers", "crds", "openapi.path", "helmCharts", "vendor it into the repository"} {
		if !strings.Contains(text, want) {
			t.Errorf("errors lack %q:\n%s", want, text)
		}
	}
	for _, ok := range []string{"docs.example", "shop.example"} {
		if strings.Contains(text, ok) {
			t.Errorf("a URL that is only data was refused (%s):\n%s", ok, text)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("kustomize fetched %d times from the network", n)
	}

	// The same file sources, local, still build.
	fsys = fstest.MapFS{
		"k/kustomization.yaml": file("configMapGenerator:\n- name: local\n  files:\n  - data=data.txt\n  literals:\n  - docs=https://docs.example/flotilla\n"),
		"k/data.txt":           file("x"),
	}
	objs, err := Load(fsys, nil)
	if err != nil || len(objs) != 1 {
		t.Fatalf("a local generator: %v %v", ids(objs), err)
	}
}

func TestIsRemote(t *testing.T) {
	for s, want := range map[string]bool{
		"../../base": false, "base": false, "patch.yaml": false, "./x//y": false, "/abs/path": false,
		"https://example.com/x": true, "git@github.com:org/repo": true, "github.com/org/repo": true,
		"example.com/org/repo//dir?ref=v1": true, "example.com/org/repo//dir": true, "dev.azure.com/o/p/_git/r": true,
		"apiVersion: v1\nkind: X": false, "ssh://git@host/repo": true,
		"http:": true, "HTTPS:example.com/x": true, "s3://bucket/k": true, "cm.yaml#frag": false,
	} {
		if got := isRemote(s); got != want {
			t.Errorf("isRemote(%q) = %v, want %v", s, got, want)
		}
	}
}

// A file over MaxFileSize is left out of kustomize's copy, by its size,
// before it is read: the manifests beside it build, and a build that
// needs it says why it is missing.
func TestLoadKustomizeLeavesOutHugeFiles(t *testing.T) {
	fsys := fstest.MapFS{
		"k/kustomization.yaml": file("resources:\n- cm.yaml\n"),
		"k/cm.yaml":            file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n"),
		"k/huge.bin":           &fstest.MapFile{Data: make([]byte, MaxFileSize+1)},
	}
	objs, err := Load(fsys, nil)
	if err != nil || len(objs) != 1 {
		t.Fatalf("objects %v, err %v", ids(objs), err)
	}
	fsys["k/kustomization.yaml"] = file("configMapGenerator:\n- name: big\n  files: [huge.bin]\n")
	_, err = Load(fsys, nil)
	if err == nil || !strings.Contains(err.Error(), "k/huge.bin (8388609 bytes)") {
		t.Fatalf("a build that needs the huge file: %v", err)
	}
}
