package describe

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/ctl/diagnose"
	"flotilla.dev/flotilla/ctl/term"
)

var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func TestSecretValuesNeverShown(t *testing.T) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "default"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"password": []byte("hunter2")}}
	out, err := Describe(s, &diagnose.Facts{Now: now}, term.Style{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "password:  7 bytes") {
		t.Errorf("describe secret:\n%s", out)
	}
}

func TestEveryServedKindDescribes(t *testing.T) {
	for _, r := range api.Resources() {
		obj := r.New()
		out, err := Describe(obj, &diagnose.Facts{Now: now}, term.Style{})
		if err != nil {
			t.Errorf("%s: %v", r.Kind, err)
			continue
		}
		if !strings.HasPrefix(out, "Name:") || !strings.Contains(out, "Events:") {
			t.Errorf("%s:\n%s", r.Kind, out)
		}
	}
	if _, err := Describe(&runtime.Unknown{}, &diagnose.Facts{}, term.Style{}); err == nil {
		t.Error("unknown object described")
	}
}

func TestRolloutPolicyShowsWavesAndFailingDevices(t *testing.T) {
	ten := int32(10)
	rp := &v1alpha1.RolloutPolicy{ObjectMeta: metav1.ObjectMeta{Name: "kiosks", Namespace: "shops"},
		Spec: v1alpha1.RolloutPolicySpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kiosk"}},
			Waves: []v1alpha1.RolloutWave{{Name: "canary", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}},
				{Name: "ten-percent", Percent: &ten}, {Name: "rest"}},
			OnFailure: v1alpha1.RolloutFailureRollback,
		},
		Status: v1alpha1.RolloutPolicyStatus{Workloads: []v1alpha1.WorkloadRollout{{
			Kind: "DaemonSet", Name: "kiosk", Revision: "6b9f7d", PreviousRevision: "5c8d4", Phase: v1alpha1.RolloutRolledBack, CurrentWave: "canary",
			Waves: []v1alpha1.WaveStatus{{Name: "canary", Devices: 2, Done: 1, Failed: 1,
				FailedDevices: []v1alpha1.DeviceFailure{{Node: "shop-7", Reason: "ImagePullBackOff", Message: "kiosk:v2 not found"}}}},
		}}, Conditions: []metav1.Condition{{Type: v1alpha1.ConditionOverlapping, Status: metav1.ConditionTrue, Reason: "StagedByAnotherPolicy",
			Message: "Deployment menu is staged by RolloutPolicy beta (the first by name); this policy ignores it"}}},
	}
	out, err := Describe(rp, &diagnose.Facts{Now: now}, term.Style{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1. canary:", "devices matching ring=canary", "10% of the devices left", "every device left",
		"On Failure:", "Rollback", "DaemonSet kiosk:", "RolledBack, revision 6b9f7d (from 5c8d4)",
		"shop-7 (wave canary): ImagePullBackOff kiosk:v2 not found",
		"Conditions:\n  Type         Status  Reason                 Message\n  Overlapping  True    StagedByAnotherPolicy  Deployment menu is staged by RolloutPolicy beta"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}

func TestDeploymentShowsConditionsEventsAndDiagnosis(t *testing.T) {
	two := int32(2)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour)),
		Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: "{...}", "deployment.kubernetes.io/revision": "4"}},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}}}}
	ev := corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: "Deployment", Namespace: "shop", Name: "web"}, Type: "Normal",
		Reason: "ScalingReplicaSet", Message: "Scaled up replica set web-4 to 2", Source: corev1.EventSource{Component: "deployment-controller"},
		LastTimestamp: metav1.NewTime(now.Add(-2 * time.Minute))}
	out, err := Describe(d, &diagnose.Facts{Now: now, Events: []corev1.Event{ev}}, term.Style{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Replicas:", "2 desired | 2 updated | 2 total | 2 available", "Revision:", "MinimumReplicasAvailable",
		"ScalingReplicaSet", "2m", "deployment-controller", "Diagnosis:\n  OK  2/2 ready, up to date"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "last-applied-configuration") {
		t.Errorf("shows the last-applied copy:\n%s", out)
	}
}

func TestCronJobAndIndexedJobDescribe(t *testing.T) {
	tz, indexed := "Europe/Berlin", batchv1.IndexedCompletion
	last := metav1.NewTime(now.Add(-time.Hour))
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "shop"},
		Spec:   batchv1.CronJobSpec{Schedule: "0 2 * * *", TimeZone: &tz, ConcurrencyPolicy: batchv1.ForbidConcurrent},
		Status: batchv1.CronJobStatus{LastScheduleTime: &last, Active: []corev1.ObjectReference{{Kind: "Job", Name: "nightly-29410440"}}}}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "shard", Namespace: "shop"},
		Spec: batchv1.JobSpec{CompletionMode: &indexed}, Status: batchv1.JobStatus{CompletedIndexes: "0,2-4"}}
	for obj, wants := range map[runtime.Object][]string{
		cj: {"Schedule:", "0 2 * * *", "Time Zone:", "Europe/Berlin", "Concurrency Policy:", "Forbid", "Last Schedule Time:", "Active Jobs:", "nightly-29410440"},
		j:  {"Completion Mode:", "Indexed", "Completed Indexes:", "0,2-4"},
	} {
		out, err := Describe(obj, &diagnose.Facts{Now: now}, term.Style{})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("lacks %q:\n%s", want, out)
			}
		}
	}
}
