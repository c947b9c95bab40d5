package diagnose

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/printers"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

// LastSeenNode is when a device last reported: its Lease's renew time, or
// the heartbeat of its Ready condition when it has no lease.
func LastSeenNode(n *corev1.Node, f *Facts) time.Time {
	var t time.Time
	for _, l := range f.Leases {
		if l.Namespace == api.NamespaceNodeLease && l.Name == n.Name && l.Spec.RenewTime != nil {
			t = l.Spec.RenewTime.Time
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.LastHeartbeatTime.Time.After(t) {
			t = c.LastHeartbeatTime.Time
		}
	}
	return t
}

// nodeReady says whether a device is Ready and, if not, how it reads
// ("NotReady, last seen 5m ago").
func nodeReady(n *corev1.Node, f *Facts, now time.Time) (bool, string) {
	status := printers.NodeStatus(n)
	if strings.HasPrefix(status, "Ready") {
		return true, status
	}
	return false, fmt.Sprintf("%s, last seen %s", strings.Split(status, ",")[0], ago(now, LastSeenNode(n, f)))
}

// Node diagnoses a device.
func Node(n *corev1.Node, f *Facts) Finding {
	now := f.now()
	fd := Finding{Object: objectName("Node", "", n.Name), Owner: "the agent on device " + n.Name}
	if ready, why := nodeReady(n, f, now); !ready {
		fd.Severity, fd.Stage = Critical, StageDevice
		fd.Owner += " (or its network link)"
		fd.Summary = "device is " + why
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && (c.Reason != "" || c.Message != "") {
				fd.Details = append(fd.Details, fmt.Sprintf("Ready=%s since %s: %s %s", c.Status, ago(now, c.LastTransitionTime.Time), c.Reason, c.Message))
			}
		}
		pods := 0
		for _, p := range f.Pods {
			if p.Spec.NodeName == n.Name && p.DeletionTimestamp == nil {
				pods++
			}
		}
		if pods > 0 {
			fd.Details = append(fd.Details, fmt.Sprintf("%d pods bound to it keep their last reported state", pods))
		}
		if n.Labels[api.LabelAutonomy] == "true" {
			fd.Details = append(fd.Details, "autonomous device: its pods are not evicted while it is away")
		}
		return fd
	}
	var pressure []string
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady && c.Status == corev1.ConditionTrue {
			pressure = append(pressure, string(c.Type))
			if c.Message != "" {
				fd.Details = append(fd.Details, string(c.Type)+": "+c.Message)
			}
		}
	}
	switch {
	case len(pressure) > 0:
		fd.Severity, fd.Stage = Warning, StageDevice
		fd.Summary = "device reports " + strings.Join(pressure, ", ")
	case n.Spec.Unschedulable:
		fd.Severity, fd.Stage, fd.Owner = Info, StageDevice, "whoever cordoned it"
		fd.Summary = "cordoned: no new pods are scheduled to it"
	default:
		fd.Stage, fd.Summary = StageDone, "ready, last seen "+ago(now, LastSeenNode(n, f))
	}
	return fd
}

// Service diagnoses a Service: does it have ready endpoints, and if not,
// how many pods its selector matches and how many of those are ready.
func Service(svc *corev1.Service, f *Facts) Finding {
	fd := Finding{Object: objectName("Service", svc.Namespace, svc.Name), Stage: StageEndpoints}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		fd.Stage, fd.Summary = StageDone, "an alias of "+svc.Spec.ExternalName
		return fd
	}
	ready, total := 0, 0
	for _, es := range f.EndpointSlices {
		if es.Namespace != svc.Namespace || es.Labels[api.LabelServiceName] != svc.Name {
			continue
		}
		for _, e := range es.Endpoints {
			total += len(e.Addresses)
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				ready += len(e.Addresses)
			}
		}
	}
	if len(svc.Spec.Selector) == 0 {
		fd.Stage = StageDone
		fd.Summary = fmt.Sprintf("no selector: %d endpoints managed by hand, %d ready", total, ready)
		if ready == 0 {
			fd.Severity, fd.Stage, fd.Owner = Info, StageEndpoints, "whoever manages its EndpointSlices"
		}
		return fd
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var matched, readyPods []corev1.Pod
	var notReady []*corev1.Pod
	for i := range f.Pods {
		p := &f.Pods[i]
		if p.Namespace != svc.Namespace || !sel.Matches(labels.Set(p.Labels)) || p.DeletionTimestamp != nil {
			continue
		}
		matched = append(matched, *p)
		if podReady(p) {
			readyPods = append(readyPods, *p)
		} else {
			notReady = append(notReady, p)
		}
	}
	if ready > 0 {
		fd.Stage = StageDone
		fd.Summary = fmt.Sprintf("%d ready endpoints of %d; selector %s matches %d pods", ready, total, sel, len(matched))
		return fd
	}
	fd.Severity = Warning
	fd.Summary = fmt.Sprintf("no ready endpoints: selector %s matches %d pods, %d ready", sel, len(matched), len(readyPods))
	switch {
	case len(matched) == 0:
		fd.Owner = "the Service's selector or the workload meant to match it"
		fd.Details = append(fd.Details, "no pod in namespace "+svc.Namespace+" carries the labels "+sel.String())
	case len(readyPods) == 0:
		worst := worstPod(notReady, f)
		fd.Owner = worst.Owner
		fd.Details = append(fd.Details, "worst pod "+worst.Object+": "+worst.Summary)
		fd.Details = append(fd.Details, worst.Details...)
	default:
		fd.Owner = "the endpointslice controller"
		fd.Details = append(fd.Details, fmt.Sprintf("%d ready pods match but no ready endpoint lists them", len(readyPods)))
	}
	return fd
}

// worstPod diagnoses pods and returns the worst finding.
func worstPod(pods []*corev1.Pod, f *Facts) Finding {
	var fs []Finding
	for _, p := range pods {
		fs = append(fs, Pod(p, f))
	}
	if len(fs) == 0 {
		return Finding{}
	}
	Sort(fs)
	return fs[0]
}

var fileInMessage = regexp.MustCompile(`[\w./-]+\.(?:ya?ml|json)\b`)

// GitSource diagnoses a source: is the latest commit applied, and if not,
// which commit, which file and what error.
func GitSource(g *v1alpha1.GitSource, f *Facts) Finding {
	now := f.now()
	fd := Finding{Object: objectName("GitSource", g.Namespace, g.Name), Stage: StageSource, Owner: "the commit in " + g.Spec.URL}
	var ready *metav1.Condition
	for i := range g.Status.Conditions {
		if g.Status.Conditions[i].Type == v1alpha1.ConditionReady {
			ready = &g.Status.Conditions[i]
		}
	}
	applied := g.Status.LastAppliedCommit
	attempted := g.Status.LastAttemptedCommit
	switch {
	case g.Spec.Suspend:
		fd.Severity, fd.Owner = Info, "whoever suspended it"
		fd.Summary = "suspended at commit " + printers.ShortCommit(applied)
		return fd
	case ready == nil || ready.Status == metav1.ConditionUnknown:
		fd.Severity, fd.Owner = Info, "the hub's GitOps loop"
		fd.Summary = "not reconciled yet"
		if ready != nil && ready.Message != "" {
			fd.Summary += ": " + ready.Message
		}
		return fd
	case ready.Status == metav1.ConditionTrue:
		fd.Stage = StageDone
		fd.Summary = "applied commit " + printers.ShortCommit(applied)
		if g.Status.LastAppliedTime != nil {
			fd.Summary += " " + ago(now, g.Status.LastAppliedTime.Time)
		}
		return fd
	}
	fd.Severity = Critical
	msg := ready.Message
	if msg == "" {
		msg = g.Status.Message
	}
	commit := attempted
	for _, a := range g.Status.History {
		if commit == "" {
			commit = a.Commit
		}
		if a.Commit == commit && a.Message != "" && msg == "" {
			msg = a.Message
		}
	}
	fd.Summary = fmt.Sprintf("commit %s not applied (%s)", printers.ShortCommit(commit), ready.Reason)
	if commit != "" {
		fd.Details = append(fd.Details, "commit: "+commit)
	}
	if file := fileInMessage.FindString(msg); file != "" {
		fd.Details = append(fd.Details, "file: "+file)
	}
	if msg != "" {
		fd.Details = append(fd.Details, "error: "+msg)
	}
	if applied != "" && applied != commit {
		fd.Details = append(fd.Details, "still applied: commit "+printers.ShortCommit(applied)+" (the fleet runs that until this is fixed)")
	} else if applied == "" {
		fd.Details = append(fd.Details, "nothing from this source has been applied yet")
	}
	return fd
}

// Deployment diagnoses a rollout: a missed progress deadline, a failure
// to create replicas, or pods not ready (then the worst pod says why).
func Deployment(d *appsv1.Deployment, f *Facts) Finding {
	fd := Finding{Object: objectName("Deployment", d.Namespace, d.Name), Stage: StageRollout, Owner: "the deployment controller"}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	for _, c := range st.Conditions {
		switch {
		case c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue:
			fd.Severity = Critical
			fd.Summary = "cannot create pods: " + c.Message
			return fd
		case c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded":
			fd.Severity = Critical
			fd.Summary = "rollout exceeded its progress deadline: " + c.Message
		}
	}
	if d.Generation > st.ObservedGeneration {
		fd.Severity, fd.Summary = Info, "the controller has not seen the latest change yet"
		return fd
	}
	if fd.Severity == OK && st.UpdatedReplicas >= want && st.ReadyReplicas >= want && st.Replicas <= want {
		fd.Stage, fd.Summary = StageDone, fmt.Sprintf("%d/%d ready, up to date", st.ReadyReplicas, want)
		return fd
	}
	counts := fmt.Sprintf("%d/%d ready, %d up to date, %d available", st.ReadyReplicas, want, st.UpdatedReplicas, st.AvailableReplicas)
	// A staged rollout holding replicas on the previous revision is the
	// reason, even past the progress deadline (which a wave's own
	// replicas may run out while it waits for them).
	held := Finding{Object: fd.Object, Stage: fd.Stage, Owner: fd.Owner, Severity: Warning, Summary: counts}
	if held, ok := heldWave(held, stagedOf{kind: "Deployment", resource: "deployment", name: d.Name, labels: d.Labels,
		generation: d.Generation, old: max(want-st.UpdatedReplicas, 0), unit: "replica(s)"}, f); ok {
		return held
	}
	if fd.Summary == "" {
		fd.Severity = Warning
		fd.Summary = counts
	}
	return withWorstPod(fd, d.Namespace, d.Spec.Selector, f)
}

// DaemonSet diagnoses a DaemonSet's rollout over the devices.
func DaemonSet(ds *appsv1.DaemonSet, f *Facts) Finding {
	fd := Finding{Object: objectName("DaemonSet", ds.Namespace, ds.Name), Stage: StageRollout, Owner: "the daemonset controller"}
	st := ds.Status
	if ds.Generation > st.ObservedGeneration {
		fd.Severity, fd.Summary = Info, "the controller has not seen the latest change yet"
		return fd
	}
	if st.NumberReady >= st.DesiredNumberScheduled && st.UpdatedNumberScheduled >= st.DesiredNumberScheduled && st.NumberMisscheduled == 0 {
		fd.Stage = StageDone
		fd.Summary = fmt.Sprintf("ready on %d/%d devices, up to date", st.NumberReady, st.DesiredNumberScheduled)
		return fd
	}
	fd.Severity = Warning
	fd.Summary = fmt.Sprintf("ready on %d/%d devices, %d up to date", st.NumberReady, st.DesiredNumberScheduled, st.UpdatedNumberScheduled)
	if held, ok := heldWave(fd, stagedOf{kind: "DaemonSet", resource: "daemonset", name: ds.Name, labels: ds.Labels,
		generation: ds.Generation, old: st.DesiredNumberScheduled - st.UpdatedNumberScheduled, unit: "device(s)"}, f); ok {
		return held
	}
	if st.NumberMisscheduled > 0 {
		fd.Details = append(fd.Details, fmt.Sprintf("%d pods run on devices they should not", st.NumberMisscheduled))
	}
	if ds.Annotations[api.AnnotationPrepull] == "true" {
		var blocked bool
		if fd, blocked = prepullBlocked(fd, ds, f); blocked {
			return fd
		}
	}
	return withWorstPod(fd, ds.Namespace, ds.Spec.Selector, f)
}

// stagedOf is the workload heldWave explains: old of its unit (devices of
// a DaemonSet, replicas of a Deployment) run a previous revision.
type stagedOf struct {
	kind, resource, name string
	labels               map[string]string
	generation           int64
	old                  int32
	unit                 string
}

// heldWave names a staged rollout's wave as the reason devices run the
// previous revision: waves not yet admitted wait for the current one, and a
// paused or failed wave holds them.
func heldWave(fd Finding, s stagedOf, f *Facts) (Finding, bool) {
	rp := waves.PolicyFor(f.RolloutPolicies, s.labels)
	if rp == nil {
		return fd, false
	}
	w := waves.Find(rp, waves.Workload{Kind: s.kind, Name: s.name})
	if w == nil || w.Phase == v1alpha1.RolloutComplete || w.ObservedGeneration < s.generation {
		return fd, false
	}
	old, unit := s.old, s.unit
	policy := "RolloutPolicy " + rp.Namespace + "/" + rp.Name
	fd.Stage, fd.Owner = StageRollout, policy
	switch w.Phase {
	case v1alpha1.RolloutProgressing:
		fd.Severity = Info
		fd.Summary = fmt.Sprintf("%d %s keep the previous revision until their wave: wave %q is proving itself (%s)", old, unit, w.CurrentWave, fd.Summary)
	case v1alpha1.RolloutPaused:
		fd.Summary = fmt.Sprintf("%d %s run the previous revision: the rollout is held at wave %q (%s)", old, unit, w.CurrentWave, fd.Summary)
		if rp.Spec.Paused {
			fd.Details = append(fd.Details, "spec.paused is set: flotctl rollout resume "+s.resource+" "+s.name+" goes on")
		}
	case v1alpha1.RolloutRolledBack:
		fd.Severity = Critical
		fd.Summary = fmt.Sprintf("%d %s run the previous revision: wave %q failed and was rolled back (%s)", old, unit, w.CurrentWave, fd.Summary)
		fd.Details = append(fd.Details, "a new template (a fixing commit) starts a new rollout")
	}
	if w.Message != "" {
		fd.Details = append(fd.Details, w.Message)
	}
	var failed []string
	for _, ws := range w.Waves {
		for _, d := range ws.FailedDevices {
			failed = append(failed, fmt.Sprintf("%s (wave %s): %s: %s", d.Node, ws.Name, d.Reason, d.Message))
		}
	}
	if len(failed) > 0 && fd.Severity < Critical {
		fd.Severity = Critical
	}
	if len(failed) > 5 {
		failed = append(failed[:5], fmt.Sprintf("... and %d more", len(failed)-5))
	}
	fd.Details = append(fd.Details, failed...)
	return fd, true
}

// prepullBlocked names the devices that cannot pull a prepull
// DaemonSet's next revision: they keep their old pods, so the rollout
// waits on the image (its signature or its registry), not on them.
func prepullBlocked(fd Finding, ds *appsv1.DaemonSet, f *Facts) (Finding, bool) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() {
		return fd, false
	}
	var failed []string
	pulling, signature := 0, false
	for i := range f.Pods {
		p := &f.Pods[i]
		if p.Namespace != ds.Namespace || !sel.Matches(labels.Set(p.Labels)) || p.Annotations[api.AnnotationPrepullImages] == "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type != api.ConditionImagesPrepulled || c.Status != corev1.ConditionFalse {
				continue
			}
			if c.Reason == "Pulling" {
				pulling++
				continue
			}
			signature = signature || c.Reason == "ErrImageSignature"
			failed = append(failed, fmt.Sprintf("pod/%s on %s: %s", p.Name, p.Spec.NodeName, c.Message))
		}
	}
	if len(failed) == 0 {
		if pulling > 0 {
			fd.Details = append(fd.Details, fmt.Sprintf("%d device(s) still pulling the next revision's images", pulling))
		}
		return fd, false
	}
	sort.Strings(failed)
	fd.Severity, fd.Stage, fd.Owner = Critical, StageImage, "the next revision's image (its registry, or the registry credentials)"
	if signature {
		fd.Stage, fd.Owner = StageSignature, "the next revision's image signature (sign it with a key the devices trust)"
	}
	fd.Summary = fmt.Sprintf("%d device(s) cannot pull the next revision and keep the old one; %s", len(failed), fd.Summary)
	if len(failed) > 5 {
		failed = append(failed[:5], fmt.Sprintf("... and %d more", len(failed)-5))
	}
	fd.Details = append(fd.Details, failed...)
	if pulling > 0 {
		fd.Details = append(fd.Details, fmt.Sprintf("%d device(s) still pulling", pulling))
	}
	return fd, true
}

func withWorstPod(fd Finding, ns string, ls *metav1.LabelSelector, f *Facts) Finding {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil || sel.Empty() {
		return fd
	}
	var pods []*corev1.Pod
	for i := range f.Pods {
		p := &f.Pods[i]
		if p.Namespace == ns && sel.Matches(labels.Set(p.Labels)) {
			pods = append(pods, p)
		}
	}
	w := worstPod(pods, f)
	if w.Healthy() {
		return fd
	}
	fd.Owner = w.Owner
	fd.Details = append(fd.Details, "worst pod "+w.Object+" ("+w.Stage+"): "+w.Summary)
	fd.Details = append(fd.Details, w.Details...)
	return fd
}

// EndpointReady reports whether an endpoint counts as ready.
func EndpointReady(e discoveryv1.Endpoint) bool {
	return e.Conditions.Ready == nil || *e.Conditions.Ready
}

func sortStrings(s []string) { sort.Strings(s) }
