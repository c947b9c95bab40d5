package main

import (
	"bytes"
	"strings"
	"testing"

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
