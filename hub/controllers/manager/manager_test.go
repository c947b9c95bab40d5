package manager

import (
	"context"
	"slices"
	"testing"
	"time"

	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"flotilla.dev/flotilla/api"
)

func TestLoopTableHasEveryLoopOnce(t *testing.T) {
	var names []string
	for _, s := range loopSpecs {
		names = append(names, s.name)
	}
	want := []string{ReplicaSet, Deployment, DaemonSet, Rollout, Job, CronJob, EndpointSlice, GarbageCollector, NodeLifecycle, Scheduler}
	if !slices.Equal(names, want) {
		t.Fatalf("loops %q, want %q", names, want)
	}
	for _, s := range loopSpecs {
		if _, ok := defaultWorkers[s.name]; ok != (s.name != NodeLifecycle && s.name != Scheduler) {
			t.Errorf("%s: has default workers %v", s.name, ok)
		}
	}
}

func TestDisabledLoopsDoNotRun(t *testing.T) {
	client := fake.NewClientset()
	meta := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	dyn := dynamicfake.NewSimpleDynamicClient(api.Scheme)
	done := make(chan error, 1)
	go func() {
		done <- RunWithClients(context.Background(), client, meta, dyn, Options{Disable: []string{
			ReplicaSet, Deployment, DaemonSet, Rollout, Job, CronJob, EndpointSlice, GarbageCollector, NodeLifecycle, Scheduler,
		}})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a manager with every loop disabled did not return")
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- RunWithClients(ctx, client, meta, dyn, Options{Disable: []string{
			ReplicaSet, DaemonSet, Rollout, Job, CronJob, EndpointSlice, GarbageCollector, NodeLifecycle, Scheduler,
		}})
	}()
	select {
	case err := <-done:
		t.Fatalf("the manager with the Deployment loop returned at once: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunWithClients = %v after ctx ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the manager did not stop when ctx ended")
	}
}
