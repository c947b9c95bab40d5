package apiserver

import (
	"bytes"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"flotilla.dev/flotilla/api"
)

// TestOwnedUpdateMatchesFieldManager: wherever ownedUpdate answers, the
// object it returns encodes byte for byte as the FieldManager's, and it
// answers the common updates (a Lease renewal, a status counter).
func TestOwnedUpdateMatchesFieldManager(t *testing.T) {
	f := newFieldManagers(nil)
	leases, _ := api.ResourceForKind(coordv1.SchemeGroupVersion.WithKind("Lease"))
	deployments, _ := api.ResourceForKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	fm := func(res *api.Resource, sub string) *fieldManager {
		m, err := f.manager(res, sub)
		if err != nil {
			t.Fatal(err)
		}
		if !m.owned {
			t.Fatalf("%s %q: ownedUpdate disabled", res.Kind, sub)
		}
		return m
	}
	leaseFM := fm(leases, "")

	// A Lease created by the agent, a field added by ops, one applied.
	renew := metav1.NewMicroTime(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	lease := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "d1", Namespace: "kube-node-lease", UID: "u1", ResourceVersion: "7", Generation: 1},
		Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To("d1"), LeaseDurationSeconds: ptr.To(int32(40)), RenewTime: &renew}}
	lease.SetGroupVersionKind(leases.GVK())
	created := f.record(leases, "", nil, lease.DeepCopy(), owner{manager: "agent", track: true}).(*coordv1.Lease)
	next := created.DeepCopy()
	next.Spec.LeaseTransitions = ptr.To(int32(1))
	withOps := leaseFM.m.UpdateNoErrors(created, next, "ops").(*coordv1.Lease)
	applied := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "d1", Namespace: "kube-node-lease"},
		Spec: coordv1.LeaseSpec{AcquireTime: &renew}}
	applied.SetGroupVersionKind(leases.GVK())
	out, err := leaseFM.m.Apply(withOps, applied, "applier", false)
	if err != nil {
		t.Fatal(err)
	}
	live := out.(*coordv1.Lease)
	if len(live.ManagedFields) != 3 {
		t.Fatalf("setup: managedFields %+v", live.ManagedFields)
	}
	// Times apart, the agent's the oldest: a refresh reorders the entries.
	for i, e := range live.ManagedFields {
		live.ManagedFields[i].Time = ptr.To(metav1.NewTime(time.Date(2026, 1, 1+i, 0, 0, 0, 0, time.UTC)))
		if e.Manager == "agent" {
			live.ManagedFields[i].Time = ptr.To(metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
		}
	}
	live.ManagedFields = sortedEntries(live.ManagedFields)

	// A field the hub itself set, untracked: nobody owns it.
	unowned := live.DeepCopy()
	unowned.Spec.PreferredHolder = ptr.To("d0")

	renewal := func(l *coordv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renew.Add(10 * time.Second))) }
	type change func(*coordv1.Lease)
	leaseCases := []struct {
		name    string
		manager string
		change  change
		fast    bool
	}{
		{"renewal", "agent", renewal, true},
		{"renewal, managedFields not sent", "agent", func(l *coordv1.Lease) { renewal(l); l.ManagedFields = nil }, true},
		{"renewal and a generation", "agent", func(l *coordv1.Lease) { renewal(l); l.Generation = 2 }, true},
		{"nothing", "agent", func(*coordv1.Lease) {}, true},
		{"a change JSON does not see", "agent", func(l *coordv1.Lease) {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renew.Add(100 * time.Nanosecond)))
		}, true},
		{"holder", "agent", func(l *coordv1.Lease) { l.Spec.HolderIdentity = ptr.To("d2") }, true},
		{"a field another manager owns", "agent", func(l *coordv1.Lease) { l.Spec.LeaseTransitions = ptr.To(int32(2)) }, false},
		{"an applied field", "agent", func(l *coordv1.Lease) { l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(renew.Add(time.Hour))) }, false},
		{"a new manager", "newcomer", renewal, false},
		{"an unnamed manager", "", renewal, false},
		{"a field set", "agent", func(l *coordv1.Lease) { l.Spec.Strategy = ptr.To(coordv1.OldestEmulationVersion) }, false},
		{"a field cleared", "agent", func(l *coordv1.Lease) { l.Spec.RenewTime = nil }, false},
		{"a field emptied", "agent", func(l *coordv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }, false},
		{"a label", "agent", func(l *coordv1.Lease) { renewal(l); l.Labels = map[string]string{"a": "b"} }, false},
		{"an annotation changed", "agent", func(l *coordv1.Lease) { l.Annotations = map[string]string{"a": "c"} }, false},
		{"an owner", "agent", func(l *coordv1.Lease) {
			renewal(l)
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "d1", UID: "n1"}}
		}, false},
		{"managedFields reset", "agent", func(l *coordv1.Lease) { renewal(l); l.ManagedFields = []metav1.ManagedFieldsEntry{} }, false},
		{"managedFields edited", "agent", func(l *coordv1.Lease) { renewal(l); l.ManagedFields = l.ManagedFields[1:] }, false},
		{"managedFields retimed", "agent", func(l *coordv1.Lease) {
			renewal(l)
			l.ManagedFields[0].Time = ptr.To(metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)))
		}, false},
	}
	for _, tc := range leaseCases {
		t.Run(tc.name, func(t *testing.T) {
			obj := live.DeepCopy()
			tc.change(obj)
			compareRecord(t, leases, leaseFM, live, obj, tc.manager, tc.fast)
		})
	}
	t.Run("a field nobody owns", func(t *testing.T) {
		obj := unowned.DeepCopy()
		obj.Spec.PreferredHolder = ptr.To("d1")
		compareRecord(t, leases, leaseFM, unowned, obj, "agent", false)
	})

	// Lives whose managedFields the FieldManager would rewrite.
	odd := map[string]func(*coordv1.Lease){
		"an entry of another version": func(l *coordv1.Lease) { l.ManagedFields[1].APIVersion = "coordination.k8s.io/v1beta1" },
		"a duplicated entry":          func(l *coordv1.Lease) { l.ManagedFields = append(l.ManagedFields, l.ManagedFields[0]) },
		"a set not canonical": func(l *coordv1.Lease) {
			l.ManagedFields[0].FieldsV1.Raw = bytes.Replace(l.ManagedFields[0].FieldsV1.Raw, []byte(`":{`), []byte(`": {`), 1)
		},
		"an empty set": func(l *coordv1.Lease) { l.ManagedFields[0].FieldsV1.Raw = []byte("{}") },
		"eleven updaters": func(l *coordv1.Lease) {
			for i := range 10 {
				e := *l.ManagedFields[len(l.ManagedFields)-1].DeepCopy()
				e.Manager = "old-" + string(rune('a'+i))
				e.Time = ptr.To(metav1.NewTime(time.Date(2024, 1, 1+i, 0, 0, 0, 0, time.UTC)))
				l.ManagedFields = append(l.ManagedFields, e)
			}
			l.ManagedFields = sortedEntries(l.ManagedFields)
		},
	}
	for name, edit := range odd {
		t.Run(name, func(t *testing.T) {
			l := live.DeepCopy()
			edit(l)
			obj := l.DeepCopy()
			renewal(obj)
			compareRecord(t, leases, leaseFM, l, obj, "agent", false)
		})
	}

	t.Run("entries out of order", func(t *testing.T) {
		l := live.DeepCopy()
		l.ManagedFields[0], l.ManagedFields[2] = l.ManagedFields[2], l.ManagedFields[0]
		obj := l.DeepCopy()
		renewal(obj)
		compareRecord(t, leases, leaseFM, l, obj, "agent", true)
	})

	// A controller's counters through the status subresource, a user's
	// replicas through the main resource.
	statusFM, mainFM := fm(deployments, "status"), fm(deployments, "")
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u2", Generation: 1, Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}}}
	d.SetGroupVersionKind(deployments.GVK())
	dlive := f.record(deployments, "", nil, d, owner{manager: "kubectl", track: true}).(*appsv1.Deployment)
	st := dlive.DeepCopy()
	st.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1}
	dlive = statusFM.m.UpdateNoErrors(dlive, st, "controller").(*appsv1.Deployment)
	for _, tc := range []struct {
		name    string
		fm      *fieldManager
		manager string
		change  func(*appsv1.Deployment)
		fast    bool
	}{
		{"status counters", statusFM, "controller", func(d *appsv1.Deployment) { d.Status.Replicas, d.Status.UpdatedReplicas = 2, 2 }, true},
		{"a status field set", statusFM, "controller", func(d *appsv1.Deployment) { d.Status.ReadyReplicas = 2 }, false},
		{"a counter to zero", statusFM, "controller", func(d *appsv1.Deployment) { d.Status.Replicas, d.Status.UpdatedReplicas = 2, 0 }, false},
		{"status by the main resource's manager", statusFM, "kubectl", func(d *appsv1.Deployment) { d.Status.Replicas = 2 }, false},
		{"replicas and generation", mainFM, "kubectl", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(3)); d.Generation = 2 }, true},
		{"replicas by the status manager", mainFM, "controller", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(3)) }, false},
		{"a selector", mainFM, "kubectl", func(d *appsv1.Deployment) { d.Spec.Selector.MatchLabels["tier"] = "x" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := dlive.DeepCopy()
			tc.change(obj)
			compareRecord(t, deployments, tc.fm, dlive, obj, tc.manager, tc.fast)
		})
	}
	// A list of structs ownedUpdate does not vouch the typed conversion
	// accepts (it does this one).
	t.Run("a list of structs", func(t *testing.T) {
		l := dlive.DeepCopy()
		l.Spec.Template.Spec.Containers = []corev1.Container{{Image: "registry.local/app:1"}}
		obj := l.DeepCopy()
		obj.Spec.Replicas = ptr.To(int32(3))
		compareRecord(t, deployments, mainFM, l, obj, "kubectl", false)
	})
	// The selector is atomic: a set owning its fields, as one written
	// before it was, is reconciled by the FieldManager.
	t.Run("a set not reconciled with the schema", func(t *testing.T) {
		l := dlive.DeepCopy()
		for i, e := range l.ManagedFields {
			if e.Manager != "kubectl" {
				continue
			}
			s := &fieldpath.Set{}
			if err := s.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
				t.Fatal(err)
			}
			if !s.Has(fieldpath.MakePathOrDie("spec", "selector")) {
				t.Fatalf("kubectl does not own the selector: %s", e.FieldsV1.Raw)
			}
			s = s.Difference(fieldpath.NewSet(fieldpath.MakePathOrDie("spec", "selector")))
			s.Insert(fieldpath.MakePathOrDie("spec", "selector", "matchLabels", "app"))
			raw, err := s.ToJSON()
			if err != nil {
				t.Fatal(err)
			}
			l.ManagedFields[i].FieldsV1.Raw = raw
		}
		obj := l.DeepCopy()
		obj.Spec.Replicas = ptr.To(int32(3))
		compareRecord(t, deployments, mainFM, l, obj, "kubectl", false)
	})
}

// compareRecord runs the FieldManager and ownedUpdate on the same update
// within one second (their times have seconds) and compares the encodings.
func compareRecord(t *testing.T, res *api.Resource, fm *fieldManager, live, obj runtime.Object, manager string, wantFast bool) {
	t.Helper()
	for {
		start := time.Now()
		slow := fm.m.UpdateNoErrors(live.DeepCopyObject(), obj.DeepCopyObject(), manager)
		fast, ok := fm.ownedUpdate(live.DeepCopyObject(), obj.DeepCopyObject(), manager)
		if time.Now().Unix() != start.Unix() {
			continue
		}
		if ok != wantFast {
			t.Fatalf("ownedUpdate answered %v, want %v", ok, wantFast)
		}
		if !ok {
			return
		}
		want, err := encodeObject(res, slow)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeObject(res, fast)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("ownedUpdate gave\n%s\nthe FieldManager\n%s", got, want)
		}
		// JSON compacts a FieldsV1; the protobuf encoding keeps it as is.
		for i, e := range managedFields(t, fast) {
			if w := managedFields(t, slow)[i]; !bytes.Equal(e.FieldsV1.Raw, w.FieldsV1.Raw) {
				t.Fatalf("entry %d: ownedUpdate gave fields %s, the FieldManager %s", i, e.FieldsV1.Raw, w.FieldsV1.Raw)
			}
		}
		return
	}
}

func managedFields(t *testing.T, obj runtime.Object) []metav1.ManagedFieldsEntry {
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m.GetManagedFields()
}

func sortedEntries(e []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	out := append([]metav1.ManagedFieldsEntry(nil), e...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if compareEntries(out[j], out[i]) < 0 {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestOwnedUpdateCoversEveryServedKind: every kind's schema types each
// field ownedUpdate may compare, so it answers for all of them (a Go field
// missing from a schema would turn it off for that kind).
func TestOwnedUpdateCoversEveryServedKind(t *testing.T) {
	f := newFieldManagers(nil)
	for _, res := range api.Resources() {
		m, err := f.manager(res, "")
		if err != nil {
			t.Fatal(err)
		}
		if !m.owned {
			t.Errorf("%s: its schema does not type every field of the Go type", res.GVK())
		}
	}
}
