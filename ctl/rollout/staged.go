package rollout

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

// StagedDaemonSetStatus reads the rollout of a DaemonSet that the
// RolloutPolicy rp stages: the wave it is at and each wave's progress
// until the policy says complete, then the DaemonSet's own counts. A
// failed wave is a failure (it holds until the template changes); a pause
// by spec.paused is waited out.
func StagedDaemonSetStatus(ds *appsv1.DaemonSet, rp *v1alpha1.RolloutPolicy) Status {
	return staged(stagedWorkload{kind: "DaemonSet", noun: "daemon set", resource: "daemonset", name: ds.Name, generation: ds.Generation,
		complete: func() Status { return DaemonSetStatus(ds) }}, rp)
}

// StagedDeploymentStatus is StagedDaemonSetStatus for a Deployment: once
// the policy says complete, the Deployment's own status (its replicas on
// devices no wave takes, and the old ones going).
func StagedDeploymentStatus(d *appsv1.Deployment, rp *v1alpha1.RolloutPolicy) Status {
	return staged(stagedWorkload{kind: "Deployment", noun: "deployment", resource: "deployment", name: d.Name, generation: d.Generation,
		complete: func() Status { return DeploymentStatus(d) }}, rp)
}

type stagedWorkload struct {
	kind, noun, resource, name string
	generation                 int64
	complete                   func() Status
}

func staged(s stagedWorkload, rp *v1alpha1.RolloutPolicy) Status {
	w := waves.Find(rp, waves.Workload{Kind: s.kind, Name: s.name})
	if w == nil || w.ObservedGeneration < s.generation {
		return Status{Message: fmt.Sprintf("Waiting for RolloutPolicy %q to take up %s %q's latest template...", rp.Name, s.noun, s.name)}
	}
	at := fmt.Sprintf("%s %q (revision %d, RolloutPolicy %q)", s.noun, s.name, w.RevisionNumber, rp.Name)
	switch w.Phase {
	case v1alpha1.RolloutComplete:
		st := s.complete()
		if st.Done {
			st.Message = fmt.Sprintf("%s %q successfully rolled out through every wave of RolloutPolicy %q", s.noun, s.name, rp.Name)
		}
		return st
	case v1alpha1.RolloutRolledBack:
		return Status{Err: fmt.Errorf("%w: %s rolled back: %s%s", ErrFailed, at, w.Message, failing(w))}
	case v1alpha1.RolloutPaused:
		for _, c := range w.Conditions {
			if c.Type == v1alpha1.ConditionWaveFailed && c.Status == "True" {
				return Status{Err: fmt.Errorf("%w: %s held: %s%s", ErrFailed, at, w.Message, failing(w))}
			}
		}
		return Status{Message: fmt.Sprintf("Rollout of %s paused at wave %q (spec.paused): %s; flotctl rollout resume %s %s goes on...", at, w.CurrentWave, Progress(w), s.resource, s.name)}
	}
	return Status{Message: fmt.Sprintf("Waiting for %s to finish: %s...", at, Progress(w))}
}

// Progress is one line of the waves: "canary 2/2 ✓, ten-percent 3/10 (1 failed), rest 0/88".
func Progress(w *v1alpha1.WorkloadRollout) string {
	parts := make([]string, 0, len(w.Waves))
	for _, ws := range w.Waves {
		p := fmt.Sprintf("%s %d/%d", ws.Name, ws.Done, ws.Devices)
		if ws.Failed > 0 {
			p += fmt.Sprintf(" (%d failed)", ws.Failed)
		}
		if ws.Name == w.CurrentWave {
			p = "[" + p + "]"
		}
		parts = append(parts, p)
	}
	return "waves " + strings.Join(parts, ", ")
}

// failing lists the failed devices and why.
func failing(w *v1alpha1.WorkloadRollout) string {
	var lines []string
	for _, ws := range w.Waves {
		for _, f := range ws.FailedDevices {
			lines = append(lines, fmt.Sprintf("\n  %s (wave %s): %s: %s", f.Node, ws.Name, f.Reason, f.Message))
		}
	}
	return strings.Join(lines, "")
}
