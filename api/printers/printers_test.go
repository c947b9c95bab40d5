package printers

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./api/printers -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test ./api/printers -update rewrites it)\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func render(t *testing.T, obj runtime.Object, opts PrintOptions) []byte {
	t.Helper()
	// As the hub does: a wide table with metadata, narrowed by the client.
	tbl, err := Table(obj, Options{Wide: true, Now: now, IncludeObject: metav1.IncludeMetadata})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := PrintTable(&buf, tbl, opts); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestGolden(t *testing.T) {
	fx := fixtures()
	// Every served kind has a fixture, so a new kind cannot go unprinted.
	for _, r := range api.Resources() {
		if _, ok := fx[r.GVR.Resource]; !ok {
			t.Errorf("no golden fixture for %s", r.GVR.Resource)
		}
	}
	names := make([]string, 0, len(fx))
	for n := range fx {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			golden(t, name, render(t, fx[name], PrintOptions{}))
			golden(t, name+"-wide", render(t, fx[name], PrintOptions{Wide: true}))
		})
	}
	t.Run("pods-all-namespaces-labels", func(t *testing.T) {
		pods := podFixtures()
		pods.Items = pods.Items[:3]
		pods.Items[0].Labels = map[string]string{"app": "web", "tier": "front"}
		golden(t, "pods-all-namespaces", render(t, pods, PrintOptions{WithNamespace: true, ShowLabels: true}))
	})
}

func TestSecretValuesNeverPrinted(t *testing.T) {
	fx := fixtures()["secrets"]
	for _, wide := range []bool{false, true} {
		out := render(t, fx, PrintOptions{Wide: wide})
		for _, secret := range []string{"super-secret-value", "hunter2", "bot"} {
			if bytes.Contains(out, []byte(secret)) {
				t.Errorf("wide=%v: secret value %q printed:\n%s", wide, secret, out)
			}
		}
	}
}

// The hub narrows nothing; a client narrowing the wide table must get the
// same text as a table built narrow.
func TestNarrowTableMatchesWideTableHidden(t *testing.T) {
	for name, obj := range fixtures() {
		narrow, err := Table(obj, Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		var a bytes.Buffer
		if err := PrintTable(&a, narrow, PrintOptions{}); err != nil {
			t.Fatal(err)
		}
		if b := render(t, obj, PrintOptions{}); !bytes.Equal(a.Bytes(), b) {
			t.Errorf("%s: narrow table\n%s\nhidden wide table\n%s", name, a.Bytes(), b)
		}
		for _, c := range narrow.ColumnDefinitions {
			if c.Priority != 0 {
				t.Errorf("%s: narrow table has wide column %q", name, c.Name)
			}
		}
	}
}

func TestColumnsAgreeWithRows(t *testing.T) {
	for _, r := range api.Resources() {
		cols := ColumnsFor(r)
		if len(cols) == 0 {
			t.Fatalf("%s: no columns", r.Kind)
		}
		tbl, err := Table(fixtures()[r.GVR.Resource], Options{Wide: true, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if len(tbl.ColumnDefinitions) != len(cols) {
			t.Errorf("%s: table has %d columns, Columns says %d", r.Kind, len(tbl.ColumnDefinitions), len(cols))
		}
		if len(tbl.Rows) == 0 {
			t.Errorf("%s: fixture has no rows", r.Kind)
		}
		for _, row := range tbl.Rows {
			if len(row.Cells) != len(cols) {
				t.Errorf("%s: row with %d cells, want %d", r.Kind, len(row.Cells), len(cols))
			}
		}
		if got := Columns(r.GVR.GroupVersion().WithKind(r.ListKind)); len(got) != len(cols) {
			t.Errorf("%s: list kind has %d columns, want %d", r.ListKind, len(got), len(cols))
		}
	}
}

func TestKubectlColumnNames(t *testing.T) {
	want := map[string]string{
		"pods":                "NAME READY STATUS RESTARTS AGE | IP NODE NOMINATED NODE READINESS GATES",
		"nodes":               "NAME STATUS ROLES AGE VERSION | INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION ARCH CONTAINER-RUNTIME",
		"deployments":         "NAME READY UP-TO-DATE AVAILABLE AGE | CONTAINERS IMAGES SELECTOR",
		"replicasets":         "NAME DESIRED CURRENT READY AGE | CONTAINERS IMAGES SELECTOR",
		"daemonsets":          "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE | CONTAINERS IMAGES SELECTOR",
		"controllerrevisions": "NAME CONTROLLER REVISION AGE |",
		"jobs":                "NAME STATUS COMPLETIONS DURATION AGE | CONTAINERS IMAGES SELECTOR",
		"cronjobs":            "NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE | CONTAINERS IMAGES SELECTOR",
		"services":            "NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE | SELECTOR",
		"endpointslices":      "NAME ADDRESSTYPE PORTS ENDPOINTS AGE |",
		"configmaps":          "NAME DATA AGE |",
		"secrets":             "NAME TYPE DATA AGE |",
		"events":              "LAST SEEN TYPE REASON OBJECT MESSAGE | SUBOBJECT SOURCE FIRST SEEN COUNT NAME",
		"leases":              "NAME HOLDER AGE |",
		"priorityclasses":     "NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY |",
		"namespaces":          "NAME STATUS AGE |",
		"gitsources":          "NAME URL REF COMMIT READY MESSAGE AGE |",
		"rolloutpolicies":     "NAME WAVES ON FAILURE PAUSED ROLLOUTS CONDITIONS AGE | SELECTOR MESSAGE",
	}
	for _, r := range api.Resources() {
		var normal, wide []string
		for _, c := range ColumnsFor(r) {
			if c.Priority == 0 {
				normal = append(normal, strings.ToUpper(c.Name))
			} else {
				wide = append(wide, strings.ToUpper(c.Name))
			}
		}
		got := strings.TrimSpace(strings.Join(normal, " ") + " | " + strings.Join(wide, " "))
		if got != want[r.GVR.Resource] {
			t.Errorf("%s columns\n got %q\nwant %q", r.GVR.Resource, got, want[r.GVR.Resource])
		}
	}
}

func TestIncludeObject(t *testing.T) {
	pod := podFixtures().Items[0]
	for _, tc := range []struct {
		policy   metav1.IncludeObjectPolicy
		wantKind string
	}{
		{metav1.IncludeObject, `"kind":"Pod"`},
		{metav1.IncludeMetadata, `"kind":"PartialObjectMetadata"`},
		{metav1.IncludeNone, `"object":null`},
	} {
		tbl, err := Table(&pod, Options{Now: now, IncludeObject: tc.policy})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(tbl)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tc.wantKind) {
			t.Errorf("includeObject=%s: %s does not contain %s", tc.policy, b, tc.wantKind)
		}
		if tc.policy == metav1.IncludeObject && !strings.Contains(string(b), `"apiVersion":"v1"`) {
			t.Errorf("includeObject=Object: row object has no apiVersion: %s", b)
		}
		// The caller's object keeps its empty TypeMeta.
		if pod.Kind != "" {
			t.Fatalf("Table changed the caller's object: kind %q", pod.Kind)
		}
		// A client decoding the hub's answer finds the metadata again.
		var back metav1.Table
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if tc.policy != metav1.IncludeNone {
			m, err := rowMeta(back.Rows[0])
			if err != nil || m.GetName() != pod.Name {
				t.Errorf("includeObject=%s: decoded row metadata %v, %v", tc.policy, m, err)
			}
		}
	}
	if _, err := Table(&pod, Options{IncludeObject: "Everything"}); err == nil {
		t.Error("includeObject=Everything accepted")
	}
	if tbl, err := Table(&pod, Options{NoHeaders: true}); err != nil || len(tbl.ColumnDefinitions) != 0 {
		t.Errorf("NoHeaders: %d columns, %v", len(tbl.ColumnDefinitions), err)
	}
}

func TestTableCarriesListMeta(t *testing.T) {
	tbl, err := Table(podFixtures(), Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.ResourceVersion != "42" || tbl.Kind != "Table" || tbl.APIVersion != "meta.k8s.io/v1" {
		t.Errorf("table meta = %+v %+v", tbl.TypeMeta, tbl.ListMeta)
	}
}

// GitSources come from flotctl's dynamic client as unstructured objects and
// must print exactly as the typed ones.
func TestUnstructuredPrintsAsTyped(t *testing.T) {
	list := &v1alpha1.GitSourceList{Items: gitSourceFixtures()}
	want := render(t, list, PrintOptions{Wide: true})

	ul := &unstructured.UnstructuredList{}
	ul.SetAPIVersion("flotilla.dev/v1alpha1")
	ul.SetKind("GitSourceList")
	for i := range list.Items {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&list.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		u := unstructured.Unstructured{Object: m}
		u.SetAPIVersion("flotilla.dev/v1alpha1")
		u.SetKind("GitSource")
		ul.Items = append(ul.Items, u)
	}
	if got := render(t, ul, PrintOptions{Wide: true}); !bytes.Equal(got, want) {
		t.Errorf("unstructured list\n%s\ntyped list\n%s", got, want)
	}
	one := ul.Items[1]
	rows, err := Rows(&one, Options{Now: now})
	if err != nil || len(rows) != 1 || rows[0].Cells[4] != "False" {
		t.Errorf("unstructured single object rows = %v, %v", rows, err)
	}
}

func TestUnknownKindGetsNameAndAge(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Widget")
	u.SetName("w1")
	u.SetCreationTimestamp(ago(2 * time.Hour))
	tbl, err := Table(u, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(tbl.Rows) != 1 || tbl.Rows[0].Cells[0] != "w1" || tbl.Rows[0].Cells[1] != "120m" {
		t.Errorf("rows = %+v", tbl.Rows)
	}
}

func TestPrintTableDecodedFromJSON(t *testing.T) {
	// Numbers decoded from the hub's JSON are float64 and must print as
	// integers.
	tbl := &metav1.Table{
		ColumnDefinitions: []metav1.TableColumnDefinition{{Name: "Name"}, {Name: "Data"}, {Name: "Extra", Priority: 1}},
		Rows:              []metav1.TableRow{{Cells: []any{"a\tb", float64(3), "x"}}},
	}
	var buf bytes.Buffer
	if err := PrintTable(&buf, tbl, PrintOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), "NAME      DATA\na b       3\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := PrintTable(&buf, tbl, PrintOptions{WithNamespace: true}); err == nil {
		t.Error("namespace column without row objects did not fail")
	}
}

func TestNodeStatus(t *testing.T) {
	nodes := nodeFixtures().Items
	want := []string{"Ready", "NotReady", "Ready,SchedulingDisabled", "Unknown"}
	for i, n := range nodes {
		if got := NodeStatus(&n); got != want[i] {
			t.Errorf("%s: %q, want %q", n.Name, got, want[i])
		}
	}
	n := corev1.Node{}
	n.Labels = map[string]string{"kubernetes.io/role": "kiosk", "node-role.kubernetes.io/gateway": "", "node-role.kubernetes.io/": "x"}
	if got := NodeRoles(&n); got != "gateway,kiosk" {
		t.Errorf("roles %q", got)
	}
}
