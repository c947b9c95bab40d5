package validation

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func template() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: image, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
}

func validDeployment() *appsv1.Deployment {
	return defaulted(&appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: template(),
		},
	})
}

func TestValidateDeployment(t *testing.T) {
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	num := func(n int32) *intstr.IntOrString { v := intstr.FromInt32(n); return &v }
	cases := []struct {
		name   string
		mutate func(d *appsv1.Deployment)
		opts   Options
		want   []want
	}{
		{name: "valid", mutate: func(d *appsv1.Deployment) {}},
		{name: "bad name", mutate: func(d *appsv1.Deployment) { d.Name = "Web" }, want: []want{invalid("metadata.name")}},
		{name: "no selector", mutate: func(d *appsv1.Deployment) { d.Spec.Selector = nil }, want: []want{required("spec.selector")}},
		{name: "empty selector", mutate: func(d *appsv1.Deployment) { d.Spec.Selector = &metav1.LabelSelector{} }, want: []want{invalid("spec.selector")}},
		{name: "selector does not match", mutate: func(d *appsv1.Deployment) { d.Spec.Template.Labels = map[string]string{"app": "api"} },
			want: []want{invalid("spec.template.metadata.labels")}},
		{name: "selector expression matches", mutate: func(d *appsv1.Deployment) {
			d.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "api"}}}}
		}},
		{name: "bad selector operator", mutate: func(d *appsv1.Deployment) {
			d.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Like"}}}
		}, want: []want{invalid("spec.selector.matchExpressions[0].operator")}},
		{name: "restart policy", mutate: func(d *appsv1.Deployment) { d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure },
			want: []want{notSupported("spec.template.spec.restartPolicy")}},
		{name: "active deadline", mutate: func(d *appsv1.Deployment) { s := int64(5); d.Spec.Template.Spec.ActiveDeadlineSeconds = &s },
			want: []want{forbidden("spec.template.spec.activeDeadlineSeconds")}},
		{name: "duplicate container", mutate: func(d *appsv1.Deployment) {
			c := d.Spec.Template.Spec.Containers[0]
			c.Ports = nil
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, c)
		}, want: []want{duplicate("spec.template.spec.containers[1].name")}},
		{name: "tag image", mutate: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.27" },
			want: []want{invalid("spec.template.spec.containers[0].image")}},
		{name: "tag image allowed", opts: Options{AllowTagImages: true}, mutate: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.27" }},
		{name: "bad template label", mutate: func(d *appsv1.Deployment) { d.Spec.Template.Labels["tier"] = "front end" },
			want: []want{invalid("spec.template.metadata.labels")}},
		{name: "negative replicas", mutate: func(d *appsv1.Deployment) { n := int32(-1); d.Spec.Replicas = &n }, want: []want{invalid("spec.replicas")}},
		{name: "no progress possible", mutate: func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: num(0), MaxSurge: pct("0%")}
		}, want: []want{invalid("spec.strategy.rollingUpdate.maxUnavailable")}},
		{name: "bad percentages", mutate: func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: pct("120%"), MaxSurge: pct("many")}
		}, want: []want{invalid("spec.strategy.rollingUpdate.maxUnavailable"), invalid("spec.strategy.rollingUpdate.maxSurge")}},
		{name: "recreate with rolling update", mutate: func(d *appsv1.Deployment) { d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType },
			want: []want{forbidden("spec.strategy.rollingUpdate")}},
		{name: "unknown strategy", mutate: func(d *appsv1.Deployment) { d.Spec.Strategy.Type = "BlueGreen"; d.Spec.Strategy.RollingUpdate = nil },
			want: []want{notSupported("spec.strategy.type")}},
		{name: "progress deadline", mutate: func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = 600 },
			want: []want{invalid("spec.progressDeadlineSeconds")}},
		{name: "negative history", mutate: func(d *appsv1.Deployment) { n := int32(-1); d.Spec.RevisionHistoryLimit = &n },
			want: []want{invalid("spec.revisionHistoryLimit")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := validDeployment()
			tc.mutate(d)
			expectErrors(t, ValidateCreate(d, tc.opts), tc.want...)
		})
	}
}

func TestValidateDeploymentUpdate(t *testing.T) {
	cases := []struct {
		name   string
		old    func(d *appsv1.Deployment)
		mutate func(d *appsv1.Deployment)
		want   []want
	}{
		{name: "scale and new image", mutate: func(d *appsv1.Deployment) {
			n := int32(5)
			d.Spec.Replicas = &n
			d.Spec.Template.Spec.Containers[0].Image = image2
		}},
		{name: "selector changed", mutate: func(d *appsv1.Deployment) {
			d.Spec.Selector.MatchLabels["tier"] = "front"
			d.Spec.Template.Labels["tier"] = "front"
		}, want: []want{invalid("spec.selector")}},
		{name: "tag image kept", old: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.27" },
			mutate: func(d *appsv1.Deployment) { n := int32(3); d.Spec.Replicas = &n }},
		{name: "tag image introduced", mutate: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.27" },
			want: []want{invalid("spec.template.spec.containers[0].image")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := stored(validDeployment())
			if tc.old != nil {
				tc.old(old)
			}
			d := old.DeepCopy()
			tc.mutate(d)
			expectErrors(t, ValidateUpdate(d, old, Options{}), tc.want...)
		})
	}
}

func TestValidateReplicaSetAndDaemonSet(t *testing.T) {
	rs := defaulted(&appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web-5d8f", Namespace: "shop"},
		Spec:       appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: template()},
	})
	expectErrors(t, ValidateCreate(rs, Options{}))
	bad := rs.DeepCopy()
	bad.Spec.Template.Labels = nil
	expectErrors(t, ValidateCreate(bad, Options{}), invalid("spec.template.metadata.labels"))
	bad = rs.DeepCopy()
	bad.Spec.Selector = nil
	expectErrors(t, ValidateCreate(bad, Options{}), required("spec.selector"))

	ds := defaulted(&appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "flotilla-system"},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: template()},
	})
	expectErrors(t, ValidateCreate(ds, Options{}))
	zero := intstr.FromInt32(0)
	bad2 := ds.DeepCopy()
	bad2.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = &zero
	expectErrors(t, ValidateCreate(bad2, Options{}), invalid("spec.updateStrategy.rollingUpdate.maxUnavailable"))
	bad2 = ds.DeepCopy()
	bad2.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: "Sometimes"}
	expectErrors(t, ValidateCreate(bad2, Options{}), notSupported("spec.updateStrategy.type"))
	onDelete := ds.DeepCopy()
	onDelete.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	expectErrors(t, ValidateCreate(onDelete, Options{}))

	old := stored(ds.DeepCopy())
	upd := old.DeepCopy()
	upd.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "x": "y"}}
	upd.Spec.Template.Labels["x"] = "y"
	expectErrors(t, ValidateUpdate(upd, old, Options{}), invalid("spec.selector"))
}

func TestValidateWorkloadStatus(t *testing.T) {
	old := stored(validDeployment())
	d := old.DeepCopy()
	d.Status = appsv1.DeploymentStatus{Replicas: 2, ReadyReplicas: 3, AvailableReplicas: 1, UpdatedReplicas: -1}
	expectErrors(t, ValidateStatusUpdate(d, old), invalid("status.readyReplicas"), invalid("status.updatedReplicas"))

	d.Status = appsv1.DeploymentStatus{Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, UpdatedReplicas: 3, ObservedGeneration: 1}
	expectErrors(t, ValidateStatusUpdate(d, old))
}
