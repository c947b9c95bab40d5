package defaults

import (
	"encoding/json"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
)

func expectEqual(t *testing.T, got, want any) {
	t.Helper()
	if !apiequality.Semantic.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("got\n%s\nwant\n%s", g, w)
	}
}

func TestDefaultPod(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{
				{Name: "scratch"},
				{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
			},
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.local/app:1.0",
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				Env:   []corev1.EnvVar{{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("0.0001"), corev1.ResourceMemory: resource.MustParse("64Mi"),
				}},
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}},
			}},
		},
	}
	Default(p)

	mode := int32(0o644)
	want := corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, DefaultMode: &mode}}},
			{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", DefaultMode: &mode}}},
		},
		Containers: []corev1.Container{{
			Name:  "app",
			Image: "registry.local/app:1.0",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Env:   []corev1.EnvVar{{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}},
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			},
			LivenessProbe: &corev1.Probe{
				ProbeHandler:   corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTP}},
				TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
			},
			TerminationMessagePath:   "/dev/termination-log",
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			ImagePullPolicy:          corev1.PullIfNotPresent,
		}},
		RestartPolicy:                 corev1.RestartPolicyAlways,
		TerminationGracePeriodSeconds: ptr(int64(30)),
		DNSPolicy:                     corev1.DNSClusterFirst,
		SecurityContext:               &corev1.PodSecurityContext{},
		SchedulerName:                 "default-scheduler",
		EnableServiceLinks:            ptr(true),
		Tolerations: []corev1.Toleration{
			{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
			{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
		},
	}
	expectEqual(t, p.Spec, want)
}

func TestPullPolicyFor(t *testing.T) {
	const d = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for image, want := range map[string]corev1.PullPolicy{
		"nginx":                        corev1.PullAlways,
		"nginx:latest":                 corev1.PullAlways,
		"nginx:1.27":                   corev1.PullIfNotPresent,
		"nginx" + d:                    corev1.PullIfNotPresent,
		"nginx:latest" + d:             corev1.PullAlways,
		"localhost:5000/app":           corev1.PullAlways,
		"localhost:5000/app:v2":        corev1.PullIfNotPresent,
		"registry.local:5000/a/b" + d:  corev1.PullIfNotPresent,
		"registry.local:5000/a/b:late": corev1.PullIfNotPresent,
	} {
		if got := PullPolicyFor(image); got != want {
			t.Errorf("PullPolicyFor(%q) = %s, want %s", image, got, want)
		}
	}
}

func TestDefaultTolerations(t *testing.T) {
	secs := int64(3600)
	cases := []struct {
		name string
		tols []corev1.Toleration
		want []string
	}{
		{name: "none", want: []string{TaintNodeNotReady, TaintNodeUnreachable}},
		{name: "own not-ready kept", tols: []corev1.Toleration{{Key: TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs}},
			want: []string{TaintNodeNotReady, TaintNodeUnreachable}},
		{name: "tolerates everything", tols: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, want: []string{""}},
		{name: "NoSchedule does not count", tols: []corev1.Toleration{{Key: TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			want: []string{TaintNodeUnreachable, TaintNodeNotReady, TaintNodeUnreachable}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tc.tols}}
			Default(p)
			var keys []string
			for _, tol := range p.Spec.Tolerations {
				keys = append(keys, tol.Key)
			}
			expectEqual(t, keys, tc.want)
			if tc.name == "own not-ready kept" && *p.Spec.Tolerations[0].TolerationSeconds != 3600 {
				t.Errorf("the pod's own tolerationSeconds was changed to %d", *p.Spec.Tolerations[0].TolerationSeconds)
			}
		})
	}
}

func template() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "nginx:1.27",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		}}},
	}
}

// A template keeps what its author wrote apart from Kubernetes' spec
// defaults: the pod-only defaults come when its pods are created.
func checkTemplate(t *testing.T, tmpl *corev1.PodTemplateSpec) {
	t.Helper()
	s := &tmpl.Spec
	if s.RestartPolicy != corev1.RestartPolicyAlways || s.DNSPolicy != corev1.DNSClusterFirst || s.SchedulerName != "default-scheduler" ||
		*s.TerminationGracePeriodSeconds != 30 || s.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("template spec not defaulted: %+v", s)
	}
	if len(s.Tolerations) != 0 || s.EnableServiceLinks != nil || s.Containers[0].Resources.Requests != nil {
		t.Errorf("template got pod-only defaults: tolerations %v, enableServiceLinks %v, requests %v",
			s.Tolerations, s.EnableServiceLinks, s.Containers[0].Resources.Requests)
	}
}

func TestDefaultDeployment(t *testing.T) {
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: template()}}
	Default(d)
	pct := intstr.FromString("25%")
	expectEqual(t, d.Spec.Replicas, ptr(int32(1)))
	expectEqual(t, d.Spec.Strategy, appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &pct, MaxSurge: &pct}})
	expectEqual(t, d.Spec.RevisionHistoryLimit, ptr(int32(10)))
	expectEqual(t, d.Spec.ProgressDeadlineSeconds, ptr(int32(600)))
	checkTemplate(t, &d.Spec.Template)

	r := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(0)), Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}}}
	Default(r)
	if r.Spec.Strategy.RollingUpdate != nil || *r.Spec.Replicas != 0 {
		t.Errorf("Recreate deployment got %+v, replicas %d", r.Spec.Strategy, *r.Spec.Replicas)
	}
}

func TestDefaultReplicaSetAndDaemonSet(t *testing.T) {
	rs := &appsv1.ReplicaSet{Spec: appsv1.ReplicaSetSpec{Template: template()}}
	Default(rs)
	expectEqual(t, rs.Spec.Replicas, ptr(int32(1)))
	checkTemplate(t, &rs.Spec.Template)

	ds := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: template()}}
	Default(ds)
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	expectEqual(t, ds.Spec.UpdateStrategy, appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one, MaxSurge: &zero}})
	expectEqual(t, ds.Spec.RevisionHistoryLimit, ptr(int32(10)))
	checkTemplate(t, &ds.Spec.Template)
}

func TestDefaultService(t *testing.T) {
	s := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}, {Name: "m", Port: 9090, TargetPort: intstr.FromString("metrics")}}}}
	Default(s)
	expectEqual(t, s.Spec, corev1.ServiceSpec{
		Ports: []corev1.ServicePort{
			{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(80)},
			{Name: "m", Port: 9090, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("metrics")},
		},
		Type:                  corev1.ServiceTypeClusterIP,
		SessionAffinity:       corev1.ServiceAffinityNone,
		IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
		IPFamilyPolicy:        ptr(corev1.IPFamilyPolicySingleStack),
		InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster),
	})

	np := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.43.0.9", SessionAffinity: corev1.ServiceAffinityClientIP}}
	Default(np)
	if np.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyCluster {
		t.Errorf("NodePort externalTrafficPolicy = %q", np.Spec.ExternalTrafficPolicy)
	}
	expectEqual(t, np.Spec.ClusterIPs, []string{"10.43.0.9"})
	expectEqual(t, np.Spec.SessionAffinityConfig, &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(10800))}})

	v6 := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIPs: []string{"fd00:43::9"}}}
	Default(v6)
	expectEqual(t, v6.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv6Protocol})
	expectEqual(t, v6.Spec.ClusterIP, "fd00:43::9")

	ext := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"}}
	Default(ext)
	if ext.Spec.IPFamilies != nil || ext.Spec.IPFamilyPolicy != nil || ext.Spec.InternalTrafficPolicy != nil || ext.Spec.ExternalTrafficPolicy != "" {
		t.Errorf("ExternalName service got IP defaults: %+v", ext.Spec)
	}
}

func TestDefaultUpdateKeepsAllocatedValues(t *testing.T) {
	old := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.43.0.9", ClusterIPs: []string{"10.43.0.9"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}, {Name: "https", Port: 443, NodePort: 30443}}}}
	Default(old)
	manifest := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Name: "http", Port: 8080}, {Name: "https", Port: 443, NodePort: 30080}, {Name: "admin", Port: 9000}}}}
	DefaultUpdate(manifest, old)
	expectEqual(t, manifest.Spec.ClusterIP, "10.43.0.9")
	expectEqual(t, manifest.Spec.ClusterIPs, []string{"10.43.0.9"})
	// http keeps nothing: its old node port is now claimed by https.
	var got []int32
	for _, p := range manifest.Spec.Ports {
		got = append(got, p.NodePort)
	}
	expectEqual(t, got, []int32{0, 30080, 0})

	toExt := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "x.example.com"}}
	DefaultUpdate(toExt, old)
	if toExt.Spec.ClusterIP != "" {
		t.Errorf("an ExternalName service got the old cluster IP %q", toExt.Spec.ClusterIP)
	}
}

func TestDefaultOtherKinds(t *testing.T) {
	sec := &corev1.Secret{Data: map[string][]byte{"a": []byte("1"), "b": []byte("2")}, StringData: map[string]string{"b": "two", "c": "3"}}
	Default(sec)
	expectEqual(t, sec, &corev1.Secret{Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"a": []byte("1"), "b": []byte("two"), "c": []byte("3")}})

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	Default(ns)
	expectEqual(t, ns.Labels, map[string]string{"kubernetes.io/metadata.name": "shop"})
	expectEqual(t, ns.Status.Phase, corev1.NamespaceActive)

	node := &corev1.Node{Spec: corev1.NodeSpec{PodCIDR: "10.42.1.0/24"}, Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}
	Default(node)
	expectEqual(t, node.Spec.PodCIDRs, []string{"10.42.1.0/24"})
	expectEqual(t, node.Status.Allocatable, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")})
	node.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("1")
	if c := node.Status.Capacity[corev1.ResourceCPU]; c.String() != "2" {
		t.Errorf("allocatable shares its map with capacity: capacity is now %s", c.String())
	}

	es := &discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Port: ptr(int32(80))}}}
	Default(es)
	expectEqual(t, es.Ports, []discoveryv1.EndpointPort{{Name: ptr(""), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(80))}})
	// A slice nobody gave a site is served by every device; a site given
	// is kept.
	expectEqual(t, es.Labels, map[string]string{api.LabelSite: api.SiteFleet})
	sited := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{api.LabelSite: ""}}}
	Default(sited)
	expectEqual(t, sited.Labels, map[string]string{api.LabelSite: ""})

	gs := &v1alpha1.GitSource{Spec: v1alpha1.GitSourceSpec{URL: "https://git.example.com/fleet.git", Verify: &v1alpha1.GitVerification{}}}
	Default(gs)
	expectEqual(t, gs.Spec, v1alpha1.GitSourceSpec{
		URL:      "https://git.example.com/fleet.git",
		Ref:      v1alpha1.GitRef{Branch: "main"},
		Interval: &metav1.Duration{Duration: 30 * time.Second},
		Timeout:  &metav1.Duration{Duration: 60 * time.Second},
		Prune:    ptr(true),
		Verify:   &v1alpha1.GitVerification{Mode: "head"},
	})
	pinned := &v1alpha1.GitSource{Spec: v1alpha1.GitSourceSpec{Ref: v1alpha1.GitRef{Tag: "v1"}, Prune: ptr(false)}}
	Default(pinned)
	if pinned.Spec.Ref.Branch != "" || *pinned.Spec.Prune {
		t.Errorf("defaults overrode the source's choices: %+v", pinned.Spec)
	}

	rp := &v1alpha1.RolloutPolicy{}
	Default(rp)
	expectEqual(t, rp.Spec, v1alpha1.RolloutPolicySpec{
		SuccessCriteria: v1alpha1.SuccessCriteria{ReadySeconds: ptr(int32(60)), MaxFailures: ptr(intstr.FromInt32(0)), TimeoutSeconds: ptr(int32(600))},
		OnFailure:       v1alpha1.RolloutFailurePause,
	})
	chosen := &v1alpha1.RolloutPolicy{Spec: v1alpha1.RolloutPolicySpec{
		SuccessCriteria: v1alpha1.SuccessCriteria{ReadySeconds: ptr(int32(0)), MaxFailures: ptr(intstr.FromString("5%"))},
		OnFailure:       v1alpha1.RolloutFailureRollback,
	}}
	Default(chosen)
	if *chosen.Spec.SuccessCriteria.ReadySeconds != 0 || chosen.Spec.SuccessCriteria.MaxFailures.StrVal != "5%" || chosen.Spec.OnFailure != v1alpha1.RolloutFailureRollback {
		t.Errorf("defaults overrode the policy's choices: %+v", chosen.Spec)
	}
}

func TestDefaultIsIdempotent(t *testing.T) {
	objs := []runtime.Object{
		&corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "a", Image: "a", Ports: []corev1.ContainerPort{{ContainerPort: 53}}}}}},
		&appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: template()}},
		&corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}},
		&corev1.Secret{StringData: map[string]string{"k": "v"}},
		&v1alpha1.GitSource{},
		&v1alpha1.RolloutPolicy{},
	}
	for _, o := range objs {
		Default(o)
		again := o.DeepCopyObject()
		Default(again)
		expectEqual(t, again, o)
	}
}
