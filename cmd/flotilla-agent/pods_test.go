package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"flotilla.dev/flotilla/agent/agent"
	"flotilla.dev/flotilla/agent/kubelet"
)

func TestPrintPods(t *testing.T) {
	pods := []kubelet.LocalPod{
		{Namespace: "shop", Name: "kiosk", Source: "cache", Phase: "Running", Ready: true, Restarts: 2},
		{Namespace: "shop", Name: "gone", Phase: "Running", LastError: "app: CrashLoopBackOff: back-off\nrestarting"},
	}
	var live, stored bytes.Buffer
	if err := printPods(&live, pods, true); err != nil {
		t.Fatal(err)
	}
	if err := printPods(&stored, pods, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(live.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAMESPACE") {
		t.Fatalf("table:\n%s", live.String())
	}
	for _, want := range []string{"kiosk", "cache", "yes", "2", "none (stopping)", "CrashLoopBackOff: back-off restarting"} {
		if !strings.Contains(live.String(), want) {
			t.Errorf("live table lacks %q:\n%s", want, live.String())
		}
	}
	// Readiness is the probes' verdict: unknown without a running agent.
	if strings.Contains(stored.String(), "yes") || !strings.Contains(stored.String(), " - ") {
		t.Errorf("stored table claims readiness:\n%s", stored.String())
	}
}

// TestWriteReport: -o json is the report for scripts, with the fields the
// table shows under stable names; the table says when no agent answered
// and where it read the list instead, and warns of what it could not read.
func TestWriteReport(t *testing.T) {
	rep := agent.DeviceReport{
		Pods: []kubelet.LocalPod{
			{Namespace: "shop", Name: "kiosk", UID: "u1", Source: "static", Phase: "Running", Restarts: 1, LastError: "app: back-off"},
		},
		Problems: []string{"containerd: not answering"},
	}
	pc := agent.DeviceView{DataDir: "/var/lib/flotilla/agent", ManifestsDir: "/etc/flotilla/manifests"}
	var out, errs bytes.Buffer
	if err := writeReport(&out, &errs, rep, "json", pc); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out.String())
	}
	pods, _ := got["pods"].([]any)
	if len(pods) != 1 || got["live"] != false || len(got["problems"].([]any)) != 1 {
		t.Fatalf("-o json:\n%s", out.String())
	}
	want := map[string]any{"namespace": "shop", "name": "kiosk", "uid": "u1", "source": "static", "phase": "Running",
		"ready": false, "restarts": float64(1), "lastError": "app: back-off"}
	if p := pods[0].(map[string]any); !reflect.DeepEqual(p, want) {
		t.Errorf("-o json pod = %v, want %v", p, want)
	}

	out.Reset()
	if err := writeReport(&out, &errs, rep, "table", pc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "(no agent is running: read from /var/lib/flotilla/agent/state.db, /etc/flotilla/manifests and containerd)\n") ||
		!strings.Contains(out.String(), "kiosk") || !strings.Contains(errs.String(), "warning: containerd: not answering") {
		t.Errorf("table:\n%s\nstderr:\n%s", out.String(), errs.String())
	}
}
