package printers

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api/v1alpha1"
)

// now is the fixed reference time of every golden file.
var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

func ptr[T any](v T) *T { return &v }

func objMeta(name string, created time.Duration) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "default", CreationTimestamp: ago(created)}
}

func running(name string, ready bool, restarts int32, lastExit time.Duration) corev1.ContainerStatus {
	st := corev1.ContainerStatus{
		Name: name, Ready: ready, RestartCount: restarts, Started: ptr(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ago(time.Minute)}},
	}
	if restarts > 0 {
		st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: ago(lastExit)}
	}
	return st
}

func waiting(name, reason string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, RestartCount: restarts,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func terminated(name, reason string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code, FinishedAt: ago(time.Minute)}}}
}

func containerSpecs(names ...string) []corev1.Container {
	var cs []corev1.Container
	for _, n := range names {
		cs = append(cs, corev1.Container{Name: n, Image: "registry.local/" + n + "@sha256:0123456789abcdef"})
	}
	return cs
}

func cond(t corev1.PodConditionType, ok bool) corev1.PodCondition {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	return corev1.PodCondition{Type: t, Status: s}
}

func podFixtures() *corev1.PodList {
	base := func(name string, containers ...string) corev1.Pod {
		return corev1.Pod{ObjectMeta: objMeta(name, 3*time.Hour), Spec: corev1.PodSpec{Containers: containerSpecs(containers...), NodeName: "edge-1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.42.1.7", PodIPs: []corev1.PodIP{{IP: "10.42.1.7"}}}}
	}
	var pods []corev1.Pod

	p := base("web-running", "app", "sidecar")
	p.Status.ContainerStatuses = []corev1.ContainerStatus{running("app", true, 3, 2*time.Minute), running("sidecar", true, 0, 0)}
	p.Status.Conditions = []corev1.PodCondition{cond(corev1.PodReady, true)}
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "flotilla.dev/lb"}}
	pods = append(pods, p)

	p = base("web-pending", "app")
	p.Spec.NodeName = ""
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, NominatedNodeName: "edge-2",
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}}}
	pods = append(pods, p)

	p = base("web-creating", "app")
	p.Status.Phase = corev1.PodPending
	p.Status.PodIP, p.Status.PodIPs = "", nil
	p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("app", "ContainerCreating", 0)}
	pods = append(pods, p)

	p = base("web-pull", "app")
	p.Status.Phase = corev1.PodPending
	p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("app", "ImagePullBackOff", 0)}
	pods = append(pods, p)

	p = base("web-crash", "app")
	st := waiting("app", "CrashLoopBackOff", 12)
	st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", FinishedAt: ago(40 * time.Second)}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{st}
	pods = append(pods, p)

	p = base("job-done", "task")
	p.Status.Phase = corev1.PodSucceeded
	p.Status.ContainerStatuses = []corev1.ContainerStatus{terminated("task", "Completed", 0)}
	pods = append(pods, p)

	p = base("web-init", "app")
	p.Spec.InitContainers = containerSpecs("migrate", "seed")
	p.Status.Phase = corev1.PodPending
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{terminated("migrate", "Completed", 0), running("seed", false, 0, 0)}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("app", "PodInitializing", 0)}
	pods = append(pods, p)

	p = base("web-terminating", "app")
	p.DeletionTimestamp = ptr(ago(10 * time.Second))
	p.Status.ContainerStatuses = []corev1.ContainerStatus{running("app", true, 0, 0)}
	pods = append(pods, p)

	p = base("web-oom", "app")
	p.Status.Phase = corev1.PodFailed
	p.Status.ContainerStatuses = []corev1.ContainerStatus{terminated("app", "OOMKilled", 137)}
	pods = append(pods, p)

	p = base("web-notready", "app")
	p.Status.ContainerStatuses = []corev1.ContainerStatus{running("app", false, 0, 0)}
	p.Status.Conditions = []corev1.PodCondition{cond(corev1.PodReady, false)}
	p.Namespace = "shop"
	pods = append(pods, p)

	return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "42"}, Items: pods}
}

func nodeFixtures() *corev1.NodeList {
	mk := func(name, arch string, ready corev1.ConditionStatus) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: ago(49 * time.Hour),
			Labels: map[string]string{"kubernetes.io/arch": arch}}}
		n.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v0.3.0", OSImage: "Debian GNU/Linux 13 (trixie)",
			KernelVersion: "6.12.0-1-" + arch, Architecture: arch, ContainerRuntimeVersion: "containerd://2.1.0"}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.7.10"}, {Type: corev1.NodeHostName, Address: name}}
		if ready != "" {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
		}
		return n
	}
	a := mk("edge-1", "amd64", corev1.ConditionTrue)
	a.Labels["node-role.kubernetes.io/gateway"] = ""
	b := mk("kiosk-7", "arm64", corev1.ConditionUnknown)
	b.Status.Addresses = append(b.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.9"})
	c := mk("shelf-2", "arm", corev1.ConditionTrue)
	c.Spec.Unschedulable = true
	d := mk("new-box", "", "")
	d.Status.NodeInfo = corev1.NodeSystemInfo{}
	d.Status.Addresses = nil
	return &corev1.NodeList{Items: []corev1.Node{a, b, c, d}}
}

func template(containers ...string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: containerSpecs(containers...)}}
}

func fixtures() map[string]runtime.Object {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	return map[string]runtime.Object{
		"pods":  podFixtures(),
		"nodes": nodeFixtures(),
		"deployments": &appsv1.DeploymentList{Items: []appsv1.Deployment{
			{ObjectMeta: objMeta("web", 26*time.Hour), Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(3)), Selector: sel, Template: template("app", "sidecar")},
				Status: appsv1.DeploymentStatus{ReadyReplicas: 2, UpdatedReplicas: 3, AvailableReplicas: 2}},
			{ObjectMeta: objMeta("idle", 90*time.Second), Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(0)), Selector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}}, Template: template("idle")}},
		}},
		"replicasets": &appsv1.ReplicaSetList{Items: []appsv1.ReplicaSet{
			{ObjectMeta: objMeta("web-5d8f9c7b6", 26*time.Hour), Spec: appsv1.ReplicaSetSpec{Replicas: ptr(int32(3)), Selector: sel, Template: template("app")},
				Status: appsv1.ReplicaSetStatus{Replicas: 3, ReadyReplicas: 1}},
		}},
		"daemonsets": &appsv1.DaemonSetList{Items: []appsv1.DaemonSet{
			{ObjectMeta: objMeta("agent-probe", 400*24*time.Hour), Spec: appsv1.DaemonSetSpec{Selector: sel, Template: func() corev1.PodTemplateSpec {
				t := template("probe")
				t.Spec.NodeSelector = map[string]string{"kubernetes.io/arch": "arm64", "shop": "north"}
				return t
			}()}, Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, CurrentNumberScheduled: 5, NumberReady: 4, UpdatedNumberScheduled: 3, NumberAvailable: 4}},
			{ObjectMeta: objMeta("logs", 5*time.Minute), Spec: appsv1.DaemonSetSpec{Selector: sel, Template: template("shipper")}},
		}},
		"jobs": &batchv1.JobList{Items: []batchv1.Job{
			{ObjectMeta: objMeta("export-nightly", 2*time.Hour), Spec: batchv1.JobSpec{Completions: ptr(int32(3)), Parallelism: ptr(int32(2)), Selector: sel, Template: template("export")},
				Status: batchv1.JobStatus{Succeeded: 3, StartTime: ptrTime(now.Add(-2 * time.Hour)), CompletionTime: ptrTime(now.Add(-110 * time.Minute)),
					Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}},
			{ObjectMeta: objMeta("cleanup", 10*time.Minute), Spec: batchv1.JobSpec{Parallelism: ptr(int32(1)), Selector: sel, Template: template("cleanup")},
				Status: batchv1.JobStatus{Active: 1, StartTime: ptrTime(now.Add(-9 * time.Minute))}},
			{ObjectMeta: objMeta("migrate", time.Hour), Spec: batchv1.JobSpec{Completions: ptr(int32(1)), Selector: sel, Template: template("migrate")},
				Status: batchv1.JobStatus{Failed: 7, StartTime: ptrTime(now.Add(-time.Hour)),
					Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}}},
		}},
		"cronjobs": &batchv1.CronJobList{Items: []batchv1.CronJob{
			{ObjectMeta: objMeta("nightly-export", 3*24*time.Hour), Spec: batchv1.CronJobSpec{Schedule: "0 2 * * *", TimeZone: ptr("Europe/Berlin"), Suspend: ptr(false),
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: template("export")}}},
				Status: batchv1.CronJobStatus{Active: []corev1.ObjectReference{{Kind: "Job", Name: "nightly-export-29410440"}}, LastScheduleTime: ptrTime(now.Add(-5 * time.Hour))}},
			{ObjectMeta: objMeta("disk-cleanup", 10*time.Minute), Spec: batchv1.CronJobSpec{Schedule: "@hourly", Suspend: ptr(true),
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: template("cleanup")}}}},
		}},
		"controllerrevisions": &appsv1.ControllerRevisionList{Items: []appsv1.ControllerRevision{
			{ObjectMeta: func() metav1.ObjectMeta {
				m := objMeta("agent-probe-6b7c9d", 3*24*time.Hour)
				m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent-probe", Controller: ptr(true)}}
				return m
			}(), Revision: 4},
			{ObjectMeta: objMeta("orphan-1", time.Hour), Revision: 1},
		}},
		"services": &corev1.ServiceList{Items: []corev1.Service{
			{ObjectMeta: objMeta("web", 26*time.Hour), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.43.0.12", ClusterIPs: []string{"10.43.0.12"},
				Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}, {Port: 53, Protocol: corev1.ProtocolUDP}}}},
			{ObjectMeta: objMeta("kiosk", 2*time.Hour), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.43.0.40",
				ExternalIPs: []string{"192.168.7.10"}, Ports: []corev1.ServicePort{{Port: 8080, NodePort: 30080, Protocol: corev1.ProtocolTCP}}}},
			{ObjectMeta: objMeta("lb", time.Hour), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.43.0.41", Ports: []corev1.ServicePort{{Port: 443}}}},
			{ObjectMeta: objMeta("upstream", time.Hour), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "erp.example.com"}},
		}},
		"endpointslices": &discoveryv1.EndpointSliceList{Items: []discoveryv1.EndpointSlice{
			{ObjectMeta: objMeta("web-abc12", time.Hour), AddressType: discoveryv1.AddressTypeIPv4,
				Ports:     []discoveryv1.EndpointPort{{Port: ptr(int32(8080))}, {Name: ptr("metrics")}},
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.42.1.7"}}, {Addresses: []string{"10.42.2.3"}}, {Addresses: []string{"10.42.3.9"}}, {Addresses: []string{"10.42.4.2"}}, {Addresses: []string{"10.42.5.5"}}}},
			{ObjectMeta: objMeta("lonely-x1", time.Hour), AddressType: discoveryv1.AddressTypeIPv4},
		}},
		"configmaps": &corev1.ConfigMapList{Items: []corev1.ConfigMap{
			{ObjectMeta: objMeta("settings", 3*24*time.Hour), Data: map[string]string{"a": "1", "b": "2"}, BinaryData: map[string][]byte{"logo": {1}}},
			{ObjectMeta: objMeta("empty", time.Minute)},
		}},
		"secrets": &corev1.SecretList{Items: []corev1.Secret{
			{ObjectMeta: objMeta("registry-creds", 3*24*time.Hour), Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{".dockerconfigjson": []byte("super-secret-value")}},
			{ObjectMeta: objMeta("git", time.Hour), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"username": []byte("bot"), "password": []byte("hunter2")}},
		}},
		"events": &corev1.EventList{Items: []corev1.Event{
			{ObjectMeta: objMeta("web-crash.1", 10*time.Minute), Type: corev1.EventTypeWarning, Reason: "BackOff",
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "web-crash", FieldPath: "spec.containers{app}"},
				Source:         corev1.EventSource{Component: "flotilla-agent", Host: "edge-1"}, Message: "Back-off restarting failed container app\n",
				FirstTimestamp: ago(10 * time.Minute), LastTimestamp: ago(30 * time.Second), Count: 14},
			{ObjectMeta: objMeta("web-pending.2", 2*time.Minute), Type: corev1.EventTypeWarning, Reason: "FailedScheduling",
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "web-pending"}, ReportingController: "flotilla-scheduler",
				Message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.", EventTime: metav1.NewMicroTime(now.Add(-2 * time.Minute))},
			{ObjectMeta: objMeta("edge-1.3", time.Hour), Type: corev1.EventTypeNormal, Reason: "NodeReady",
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "edge-1"}, Message: "Node edge-1 status is now: NodeReady",
				EventTime: metav1.NewMicroTime(now.Add(-time.Hour)), Series: &corev1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(now.Add(-5 * time.Minute))}},
		}},
		"leases": &coordinationv1.LeaseList{Items: []coordinationv1.Lease{
			{ObjectMeta: objMeta("edge-1", 49*time.Hour), Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("edge-1"), RenewTime: ptr(metav1.NewMicroTime(now.Add(-5 * time.Second)))}},
			{ObjectMeta: objMeta("free", time.Hour)},
		}},
		"priorityclasses": &schedulingv1.PriorityClassList{Items: []schedulingv1.PriorityClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "system-node-critical", CreationTimestamp: ago(30 * 24 * time.Hour)}, Value: 2000001000, PreemptionPolicy: ptr(corev1.PreemptLowerPriority)},
			{ObjectMeta: metav1.ObjectMeta{Name: "shop-default", CreationTimestamp: ago(2 * time.Hour)}, Value: 1000, GlobalDefault: true, PreemptionPolicy: ptr(corev1.PreemptLowerPriority)},
			{ObjectMeta: metav1.ObjectMeta{Name: "batch-low", CreationTimestamp: ago(5 * time.Minute)}, Value: -10, PreemptionPolicy: ptr(corev1.PreemptNever)},
		}},
		"namespaces": &corev1.NamespaceList{Items: []corev1.Namespace{
			{ObjectMeta: metav1.ObjectMeta{Name: "default", CreationTimestamp: ago(30 * 24 * time.Hour)}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}},
			{ObjectMeta: metav1.ObjectMeta{Name: "old-shop", CreationTimestamp: ago(time.Hour)}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}},
		}},
		"gitsources": &v1alpha1.GitSourceList{Items: gitSourceFixtures()},
		"rolloutpolicies": &v1alpha1.RolloutPolicyList{Items: []v1alpha1.RolloutPolicy{
			{ObjectMeta: objMeta("kiosks", 2*24*time.Hour), Spec: v1alpha1.RolloutPolicySpec{
				Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kiosk"}},
				Waves:     []v1alpha1.RolloutWave{{Name: "canary", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}}, {Name: "ten-percent", Percent: ptr(int32(10))}, {Name: "rest"}},
				OnFailure: v1alpha1.RolloutFailureRollback,
			}, Status: v1alpha1.RolloutPolicyStatus{Workloads: []v1alpha1.WorkloadRollout{
				{Kind: "DaemonSet", Name: "kiosk", Revision: "6b9f7d", Phase: v1alpha1.RolloutRolledBack, CurrentWave: "canary"},
				{Kind: "Deployment", Name: "menu", Revision: "5c8d4", Phase: v1alpha1.RolloutComplete},
			}, Conditions: []metav1.Condition{{Type: v1alpha1.ConditionOverlapping, Status: metav1.ConditionTrue, Reason: "StagedByAnotherPolicy",
				Message: "Deployment menu-beta is staged by RolloutPolicy beta (the first by name); this policy ignores it"}}}},
			{ObjectMeta: objMeta("agents", time.Hour), Spec: v1alpha1.RolloutPolicySpec{
				Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "agent"}},
				Waves:     []v1alpha1.RolloutWave{{Name: "half", Percent: ptr(int32(50))}, {Name: "rest"}},
				OnFailure: v1alpha1.RolloutFailurePause, Paused: true,
			}, Status: v1alpha1.RolloutPolicyStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ConditionOverlapping, Status: metav1.ConditionFalse, Reason: "NoOverlap"}}}},
		}},
	}
}

func gitSourceFixtures() []v1alpha1.GitSource {
	return []v1alpha1.GitSource{
		{ObjectMeta: objMeta("fleet", 5*24*time.Hour), Spec: v1alpha1.GitSourceSpec{URL: "https://git.example.com/shop/fleet.git", Ref: v1alpha1.GitRef{Branch: "main"}},
			Status: v1alpha1.GitSourceStatus{LastAppliedCommit: "3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39", LastAttemptedCommit: "3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39",
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Applied", Message: "applied 12 objects from 3f2a9c1"}}}},
		{ObjectMeta: objMeta("kiosks", 3*time.Hour), Spec: v1alpha1.GitSourceSpec{URL: "file:///srv/git/kiosks.git", Ref: v1alpha1.GitRef{Tag: "v1.4.0"}},
			Status: v1alpha1.GitSourceStatus{LastAppliedCommit: "aa11bb2", LastAttemptedCommit: "cc33dd4",
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "ValidationFailed",
					Message: "apps/web.yaml: Deployment \"web\": spec.replicas: Invalid value: -1\nsecond line"}}}},
		{ObjectMeta: objMeta("pinned", time.Minute), Spec: v1alpha1.GitSourceSpec{URL: "git@git.example.com:ops/base.git", Ref: v1alpha1.GitRef{Commit: "0123456789abcdef0123456789abcdef01234567"}}},
	}
}

func ptrTime(t time.Time) *metav1.Time {
	m := metav1.NewTime(t)
	return &m
}
