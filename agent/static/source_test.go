package static

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/internal/testlog"
)

// The kubelet's PodSource, restated so this package need not import it.
var _ interface {
	Name() string
	Run(ctx context.Context, notify func(types.UID)) error
	HasSynced() bool
	Get(uid types.UID) (*corev1.Pod, bool)
	List() []*corev1.Pod
} = (*Source)(nil)

const node = "node1"

// pickup is the contract: changes are seen within 2 s.
const pickup = 2 * time.Second

func podYAML(name, image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  labels:
    app: %s
spec:
  containers:
  - name: main
    image: %s
`, name, name, image)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// notes records notify calls.
type notes struct {
	mu   sync.Mutex
	uids []types.UID
}

func (n *notes) add(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.uids = append(n.uids, uid)
}

func (n *notes) has(uid types.UID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.uids, uid)
}

// start runs a Source over dir until the test ends.
func start(t *testing.T, dir string, interval time.Duration) (*Source, *notes, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	src, err := New(Config{Dir: dir, NodeName: node, Interval: interval,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	n := &notes{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, n.add) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
	waitFor(t, "first scan", src.HasSynced)
	return src, n, logs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pickup)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", pickup, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func podNamed(src *Source, name string) *corev1.Pod {
	for _, p := range src.List() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no node":           {Dir: "/etc/flotilla/manifests"},
		"bad node":          {Dir: "/x", NodeName: "Not_A_Name"},
		"relative dir":      {Dir: "manifests", NodeName: node},
		"negative interval": {Dir: "/x", NodeName: node, Interval: -time.Second},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
	s, err := New(Config{NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.Dir != DefaultDir || s.cfg.Interval != DefaultInterval || s.Name() != "static" {
		t.Fatalf("defaults: dir %q interval %v name %q", s.cfg.Dir, s.cfg.Interval, s.Name())
	}
	if s.HasSynced() {
		t.Fatal("synced before Run")
	}
}

func TestPodAppearsChangesAndGoes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "web.yaml")
	writeFile(t, file, podYAML("web", "example.com/web:1"))
	src, n, _ := start(t, dir, 0)

	waitFor(t, "web pod", func() bool { return podNamed(src, "web-"+node) != nil })
	p := podNamed(src, "web-"+node)
	if p.Namespace != "default" || p.Spec.NodeName != node || p.Labels["app"] != "web" {
		t.Fatalf("pod identity: ns %q node %q labels %v", p.Namespace, p.Spec.NodeName, p.Labels)
	}
	uid1 := p.UID
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(string(uid1)) {
		t.Fatalf("uid %q is not 32 hex digits", uid1)
	}
	if p.Annotations[api.AnnotationConfigSource] != "file" || p.Annotations[api.AnnotationConfigHash] != string(uid1) {
		t.Fatalf("annotations %v", p.Annotations)
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyAlways || p.Spec.Containers[0].TerminationMessagePath == "" {
		t.Fatalf("defaults not applied: %+v", p.Spec)
	}
	if got, ok := src.Get(uid1); !ok || got != p {
		t.Fatal("Get by UID")
	}
	// The pod is published before its notify is called: wait for it.
	waitFor(t, "a notify for the added pod", func() bool { return n.has(uid1) })

	// An agent restart reads the same file to the same UID, so it adopts
	// the running containers.
	again, _, _ := start(t, dir, 0)
	if p2 := podNamed(again, "web-"+node); p2 == nil || p2.UID != uid1 {
		t.Fatalf("UID after restart = %v, want %s", p2, uid1)
	}

	writeFile(t, file, podYAML("web", "example.com/web:2"))
	waitFor(t, "changed pod", func() bool {
		p := podNamed(src, "web-"+node)
		return p != nil && p.UID != uid1
	})
	uid2 := podNamed(src, "web-"+node).UID
	if _, ok := src.Get(uid1); ok {
		t.Fatal("old pod still there after the change")
	}
	if len(src.List()) != 1 {
		t.Fatalf("%d pods after a change, want 1", len(src.List()))
	}
	waitFor(t, "notify of both UIDs", func() bool { return n.has(uid1) && n.has(uid2) })

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod gone", func() bool { _, ok := src.Get(uid2); return !ok && len(src.List()) == 0 })
	if len(src.Errors()) != 0 {
		t.Fatalf("errors: %v", src.Errors())
	}
}

func TestWhichFilesAreManifests(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yml"), podYAML("a", "example.com/a:1"))
	writeFile(t, filepath.Join(dir, ".b.yaml"), podYAML("b", "example.com/b:1"))
	writeFile(t, filepath.Join(dir, "c.yaml~"), podYAML("c", "example.com/c:1"))
	writeFile(t, filepath.Join(dir, "d.json"), podYAML("d", "example.com/d:1"))
	if err := os.Mkdir(filepath.Join(dir, "e.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "e.yaml", "f.yaml"), podYAML("f", "example.com/f:1"))
	src, _, _ := start(t, dir, 0)

	var names []string
	for _, p := range src.List() {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"a-" + node}) {
		t.Fatalf("pods %v, want only a-%s", names, node)
	}
	if len(src.Errors()) != 0 {
		t.Fatalf("errors: %v", src.Errors())
	}
}

func TestBadFilesAreReportedAndIsolated(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), podYAML("good", "example.com/good:1"))
	bad := map[string]struct {
		content string
		want    []string // substrings of the reported error
	}{
		"syntax.yaml": {
			content: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n bad: [\n",
			want:    []string{"syntax.yaml:", "invalid YAML", "indentation"},
		},
		"deploy.yaml": {
			content: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n",
			want:    []string{"deploy.yaml:1:", "apps/v1 Deployment", "kind: Pod"},
		},
		"invalid.yaml": {
			content: podYAML("inv", "example.com/inv:1") + "    ports:\n    - containerPort: 70000\n",
			want:    []string{"invalid.yaml:12: spec.containers[0].ports[0].containerPort: Invalid value: 70000"},
		},
		"typo.yaml": {
			content: strings.Replace(podYAML("typo", "example.com/t:1"), "    image:", "    imag:", 1),
			want:    []string{"typo.yaml:10: spec.containers[0].imag: unknown field", "spelling"},
		},
		"secret.yaml": {
			content: podYAML("sec", "example.com/s:1") + "  volumes:\n  - name: s\n    secret:\n      secretName: creds\n",
			want:    []string{"secret.yaml:13: spec.volumes[0].secret: Forbidden", "without the hub"},
		},
		"type.yaml": {
			content: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: 5\n",
			want:    []string{"type.yaml:4: metadata.name: is a number here but must be a string"},
		},
		"noname.yaml": {
			content: "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: c\n    image: x\n",
			want:    []string{"noname.yaml:1: metadata.name: Required value"},
		},
	}
	for f, b := range bad {
		writeFile(t, filepath.Join(dir, f), b.content)
	}
	src, _, logs := start(t, dir, 20*time.Millisecond)

	if names := podNames(src); !slices.Equal(names, []string{"good-" + node}) {
		t.Fatalf("pods %v, want only good-%s", names, node)
	}
	errs := src.Errors()
	for f, b := range bad {
		path := filepath.Join(dir, f)
		err := errs[path]
		if err == nil {
			t.Errorf("%s: no error reported", f)
			continue
		}
		for _, w := range b.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", f, err, w)
			}
		}
		var me *ManifestError
		if !errors.As(err, &me) || me.File != path {
			t.Errorf("%s: not a ManifestError naming the file: %#v", f, err)
		}
	}
	if len(errs) != len(bad) {
		t.Errorf("%d errors, want %d: %v", len(errs), len(bad), errs)
	}
	// Rescans do not log the same problem again.
	time.Sleep(200 * time.Millisecond)
	if c := strings.Count(logs.String(), "file="+filepath.Join(dir, "typo.yaml")); c != 1 {
		t.Errorf("typo.yaml logged %d times, want once:\n%s", c, logs)
	}
}

func podNames(src *Source) []string {
	var names []string
	for _, p := range src.List() {
		names = append(names, p.Name)
	}
	return names
}

func TestFileThatTurnsBadStopsItsPods(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "web.yaml")
	good := podYAML("web", "example.com/web:1")
	writeFile(t, file, good)
	src, n, logs := start(t, dir, 0)
	p := podNamed(src, "web-"+node)
	if p == nil {
		t.Fatal("no pod")
	}

	writeFile(t, file, good+"  bogus: true\n")
	waitFor(t, "pod removed", func() bool { return len(src.List()) == 0 && src.Errors()[file] != nil })
	if !strings.Contains(logs.String(), "stopping its pods") {
		t.Fatalf("no clear log that the pods stop:\n%s", logs)
	}
	waitFor(t, "a notify for the removed pod", func() bool { return n.has(p.UID) })

	writeFile(t, file, good)
	waitFor(t, "pod back", func() bool { q := podNamed(src, "web-"+node); return q != nil && q.UID == p.UID })
	if len(src.Errors()) != 0 {
		t.Fatalf("errors after the fix: %v", src.Errors())
	}
}

func TestSeveralPodsPerFileAndDuplicates(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "# two pods\n---\n"+podYAML("one", "example.com/x:1")+"---\n"+podYAML("two", "example.com/x:1")+"---\n")
	writeFile(t, filepath.Join(dir, "b.yaml"), podYAML("two", "example.com/x:2")+"---\n"+podYAML("three", "example.com/x:1"))
	writeFile(t, filepath.Join(dir, "c.yaml"), podYAML("four", "example.com/x:1")+"---\n"+podYAML("four", "example.com/x:1"))
	src, _, _ := start(t, dir, 0)

	want := []string{"one-" + node, "three-" + node, "two-" + node}
	if names := podNames(src); !slices.Equal(names, want) {
		t.Fatalf("pods %v, want %v", names, want)
	}
	if two := podNamed(src, "two-"+node); two.Spec.Containers[0].Image != "example.com/x:1" {
		t.Fatalf("two comes from %s, want a.yaml's", two.Spec.Containers[0].Image)
	}
	errs := src.Errors()
	if e := errs[filepath.Join(dir, "b.yaml")]; e == nil || !strings.Contains(e.Error(), "a.yaml") || !strings.Contains(e.Error(), "b.yaml:1:") {
		t.Fatalf("b.yaml: %v", e)
	}
	if e := errs[filepath.Join(dir, "c.yaml")]; e == nil || !strings.Contains(e.Error(), "c.yaml:12:") || !strings.Contains(e.Error(), "twice") {
		t.Fatalf("c.yaml: %v", e)
	}
}

func TestDirectoryCreatedAndRemovedLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	src, _, logs := start(t, dir, 0) // the default interval: the 2 s contract
	if len(src.List()) != 0 || len(src.Errors()) != 0 {
		t.Fatalf("missing dir: pods %v errors %v", src.List(), src.Errors())
	}
	if !strings.Contains(logs.String(), "does not exist") {
		t.Fatalf("no Info about the missing dir:\n%s", logs)
	}

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "web.yaml"), podYAML("web", "example.com/web:1"))
	waitFor(t, "pod in the new directory", func() bool { return podNamed(src, "web-"+node) != nil })

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod gone with the directory", func() bool { return len(src.List()) == 0 })
	// The file's removal can take the pod before a scan finds the
	// directory gone: the second Info may come a little later.
	waitFor(t, "the missing directory logged again", func() bool { return strings.Count(logs.String(), "does not exist") >= 2 })
	time.Sleep(3 * time.Second) // more scans (every 2 s) of the still missing directory
	if c := strings.Count(logs.String(), "does not exist"); c != 2 {
		t.Fatalf("missing-dir Info logged %d times, want once per disappearance (2)", c)
	}
}

func TestReplaceByRename(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "web.yaml")
	writeFile(t, file, podYAML("web", "example.com/web:1"))
	src, _, _ := start(t, dir, time.Hour) // fsnotify alone must see it
	uid1 := podNamed(src, "web-"+node).UID

	tmp := filepath.Join(dir, ".web.yaml.tmp")
	writeFile(t, tmp, podYAML("web", "example.com/web:2"))
	time.Sleep(3 * settleDelay)
	if p := podNamed(src, "web-"+node); p == nil || p.UID != uid1 {
		t.Fatal("a hidden temporary file changed the pod")
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "renamed-over file", func() bool {
		p := podNamed(src, "web-"+node)
		return p != nil && p.Spec.Containers[0].Image == "example.com/web:2"
	})
	if len(src.List()) != 1 {
		t.Fatalf("%d pods, want 1", len(src.List()))
	}
}

func TestRescanWithoutEvents(t *testing.T) {
	dir := t.TempDir()
	src, err := New(Config{Dir: dir, NodeName: node, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var got []types.UID
	src.sync(nil, func(u types.UID) { got = append(got, u) })
	if !src.HasSynced() || len(got) != 0 {
		t.Fatalf("empty dir: synced %v notified %v", src.HasSynced(), got)
	}
	writeFile(t, filepath.Join(dir, "web.yaml"), podYAML("web", "example.com/web:1"))
	src.sync(nil, func(u types.UID) { got = append(got, u) })
	if len(got) != 1 || podNamed(src, "web-"+node) == nil {
		t.Fatalf("a rescan with no watcher found %v", got)
	}
}

func TestUIDIdentity(t *testing.T) {
	const a = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: example.com/web:1\n"
	// Same pod, other formatting and key order, an explicit default
	// namespace and server fields from `kubectl get -o yaml`.
	const b = "# comment\nkind: Pod\napiVersion: v1\nspec:\n  containers:\n  - image: \"example.com/web:1\"\n    name: c\nmetadata:\n  namespace: default\n  uid: \"1234\"\n  resourceVersion: \"9\"\n  name: web\nstatus:\n  phase: Running\n"
	uid := func(path, node, content string) types.UID {
		t.Helper()
		res := decodeFile(path, []byte(content), node)
		if res.err != nil {
			t.Fatal(res.err)
		}
		return res.pods[0].UID
	}
	base := uid("/m/web.yaml", "n1", a)
	if got := uid("/m/web.yaml", "n1", b); got != base {
		t.Errorf("reformatted manifest: uid %s, want %s", got, base)
	}
	if uid("/m/web.yaml", "n2", a) == base {
		t.Error("another node gives the same UID")
	}
	if uid("/m/other.yaml", "n1", a) == base {
		t.Error("another file gives the same UID")
	}
	if uid("/m/web.yaml", "n1", strings.Replace(a, "web:1", "web:2", 1)) == base {
		t.Error("another image gives the same UID")
	}
}

func TestLineOf(t *testing.T) {
	const y = `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app.kubernetes.io/name: web
spec:
  containers:
  - name: a
    image: x
  - name: b
    ports:
    - containerPort: 1
    - containerPort: 2
  volumes:
    - name: v
`
	doc := splitDocuments([]byte("# header\n---\n" + y))[1]
	for path, want := range map[string]int{
		"metadata.name": 6,
		"metadata.labels[app.kubernetes.io/name]":   8,
		"spec.containers[0].image":                  12,
		"spec.containers[1]":                        13,
		"spec.containers[1].ports[1].containerPort": 16,
		"spec.containers.ports.containerPort":       15,
		"spec.volumes[0].name":                      18,
		"spec.nodeSelector":                         9,
		"nonsense":                                  3,
	} {
		if got := lineOf(doc, path); got != want {
			t.Errorf("lineOf(%s) = %d, want %d", path, got, want)
		}
	}
}

func TestConcurrentReaders(t *testing.T) {
	dir := t.TempDir()
	src, _, _ := start(t, dir, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for _, p := range src.List() {
				src.Get(p.UID)
			}
			src.Errors()
			src.HasSynced()
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		writeFile(t, filepath.Join(dir, "p.yaml"), podYAML("p", fmt.Sprintf("example.com/p:%d", i)))
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	waitFor(t, "settled", func() bool { return len(src.List()) == 1 })
}

func TestLoadReadsOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: app, image: \"registry.local/app@sha256:"+strings.Repeat("a", 64)+"\"}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Dir: dir, NodeName: "dev1"})
	if err != nil {
		t.Fatal(err)
	}
	s.Load()
	if !s.HasSynced() {
		t.Error("not synced after Load")
	}
	if pods := s.List(); len(pods) != 1 || pods[0].Name != "web-dev1" {
		t.Fatalf("Load found %v, want web-dev1", pods)
	}
}
