package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api"
)

// Annotations kubectl and the deployment controller use.
const (
	RevisionAnnotation    = "deployment.kubernetes.io/revision"
	ChangeCauseAnnotation = "kubernetes.io/change-cause"
	RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"
)

// ErrFailed marks a rollout that will not finish by itself.
var ErrFailed = errors.New("rollout failed")

// Status is where a rollout stands.
type Status struct {
	// Message is the progress line ("Waiting for ... 2 of 3 updated replicas
	// are available...") or the success line.
	Message string
	Done    bool
	// Err is set (wrapping ErrFailed) when the rollout cannot finish.
	Err error
}

// DeploymentStatus reads a Deployment's rollout as kubectl does.
func DeploymentStatus(d *appsv1.Deployment) Status {
	if d.Generation > d.Status.ObservedGeneration {
		return Status{Message: "Waiting for deployment spec update to be observed..."}
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return Status{Err: fmt.Errorf("%w: deployment %q exceeded its progress deadline: %s", ErrFailed, d.Name, c.Message)}
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	switch {
	case st.UpdatedReplicas < want:
		return Status{Message: fmt.Sprintf("Waiting for deployment %q rollout to finish: %d out of %d new replicas have been updated...", d.Name, st.UpdatedReplicas, want)}
	case st.Replicas > st.UpdatedReplicas:
		return Status{Message: fmt.Sprintf("Waiting for deployment %q rollout to finish: %d old replicas are pending termination...", d.Name, st.Replicas-st.UpdatedReplicas)}
	case st.AvailableReplicas < st.UpdatedReplicas:
		return Status{Message: fmt.Sprintf("Waiting for deployment %q rollout to finish: %d of %d updated replicas are available...", d.Name, st.AvailableReplicas, st.UpdatedReplicas)}
	}
	return Status{Message: fmt.Sprintf("deployment %q successfully rolled out", d.Name), Done: true}
}

// DaemonSetStatus reads a DaemonSet's rollout over the devices.
func DaemonSetStatus(ds *appsv1.DaemonSet) Status {
	if ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		return Status{Err: fmt.Errorf("%w: daemon set %q uses the OnDelete strategy: its pods change only when deleted, so there is no rollout to follow", ErrFailed, ds.Name)}
	}
	if ds.Generation > ds.Status.ObservedGeneration {
		return Status{Message: "Waiting for daemon set spec update to be observed..."}
	}
	st := ds.Status
	switch {
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return Status{Message: fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d out of %d new pods have been updated...", ds.Name, st.UpdatedNumberScheduled, st.DesiredNumberScheduled)}
	case st.NumberAvailable < st.DesiredNumberScheduled:
		return Status{Message: fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d of %d updated pods are available...", ds.Name, st.NumberAvailable, st.DesiredNumberScheduled)}
	}
	return Status{Message: fmt.Sprintf("daemon set %q successfully rolled out", ds.Name), Done: true}
}

// Revision is one entry of a workload's history: a Deployment's
// ReplicaSet or a DaemonSet's ControllerRevision.
type Revision struct {
	Number      int64
	ChangeCause string
	// Name is the ReplicaSet's or the ControllerRevision's.
	Name     string
	Template *corev1.PodTemplateSpec
}

// History lists a Deployment's revisions, oldest first, from the
// ReplicaSets it controls.
func History(d *appsv1.Deployment, rss []appsv1.ReplicaSet) []Revision {
	var out []Revision
	for i := range rss {
		rs := &rss[i]
		if !ownedBy(rs.OwnerReferences, d.UID) {
			continue
		}
		n, err := strconv.ParseInt(rs.Annotations[RevisionAnnotation], 10, 64)
		if err != nil {
			continue
		}
		t := rs.Spec.Template.DeepCopy()
		delete(t.Labels, api.LabelPodTemplateHash)
		out = append(out, Revision{Number: n, ChangeCause: rs.Annotations[ChangeCauseAnnotation], Name: rs.Name, Template: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

// DaemonSetHistory lists a DaemonSet's revisions, oldest first, from the
// ControllerRevisions it controls (their data is the template as a
// strategic merge patch, as Kubernetes writes it).
func DaemonSetHistory(ds *appsv1.DaemonSet, revs []appsv1.ControllerRevision) []Revision {
	var out []Revision
	for i := range revs {
		r := &revs[i]
		if !ownedBy(r.OwnerReferences, ds.UID) {
			continue
		}
		var data struct {
			Spec struct {
				Template *corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if json.Unmarshal(r.Data.Raw, &data) != nil || data.Spec.Template == nil {
			continue
		}
		out = append(out, Revision{Number: r.Revision, ChangeCause: r.Annotations[ChangeCauseAnnotation], Name: r.Name, Template: data.Spec.Template})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.Controller != nil && *r.Controller && r.UID == uid {
			return true
		}
	}
	return false
}

// UndoPatch returns the JSON patch that rolls a workload (kind and name,
// its annotations) back to revision to of hist (0: the one before the
// current), and the revision chosen.
func UndoPatch(kind, name string, annotations map[string]string, hist []Revision, to int64) ([]byte, int64, error) {
	if len(hist) == 0 {
		return nil, 0, fmt.Errorf("%s %q has no rollout history", kind, name)
	}
	var target *Revision
	if to == 0 {
		if len(hist) < 2 {
			return nil, 0, fmt.Errorf("%s %q has no previous revision to roll back to", kind, name)
		}
		target = &hist[len(hist)-2]
	} else {
		for i := range hist {
			if hist[i].Number == to {
				target = &hist[i]
			}
		}
		if target == nil {
			return nil, 0, fmt.Errorf("unable to find revision %d of %s %q (it has %s)", to, kind, name, numbers(hist))
		}
	}
	patch := []map[string]any{{"op": "replace", "path": "/spec/template", "value": target.Template}}
	if target.ChangeCause != "" {
		patch = append(patch, map[string]any{"op": "add", "path": "/metadata/annotations", "value": mergeAnn(annotations, ChangeCauseAnnotation, target.ChangeCause)})
	}
	b, err := json.Marshal(patch)
	return b, target.Number, err
}

func mergeAnn(a map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for ak, av := range a {
		if ak != k {
			out[ak] = av
		}
	}
	return out
}

func numbers(h []Revision) string {
	s := ""
	for i, r := range h {
		if i > 0 {
			s += ", "
		}
		s += strconv.FormatInt(r.Number, 10)
	}
	return s
}

// RestartPatch is the strategic merge patch that makes the controller
// replace every pod, as `kubectl rollout restart` does: a new template
// annotation with the time of the restart.
func RestartPatch(now time.Time) []byte {
	p := map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{RestartedAtAnnotation: now.Format(time.RFC3339)}}}}}
	b, _ := json.Marshal(p)
	return b
}

// TemplateSummary describes a pod template in one line for the history.
func TemplateSummary(t *corev1.PodTemplateSpec) string {
	s := ""
	for i, c := range t.Spec.Containers {
		if i > 0 {
			s += ", "
		}
		s += c.Name + "=" + c.Image
	}
	return s
}
