package rollout

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

// Reasons of the Overlapping condition.
const (
	ReasonStagedByAnother = "StagedByAnotherPolicy"
	ReasonNoOverlap       = "NoOverlap"
)

// maxNamedOverlaps bounds the workloads the condition names.
const maxNamedOverlaps = 10

// ignored is a workload a policy selects while another stages it.
type ignored struct {
	workload waves.Workload
	stagedBy string
}

// ignoredBy lists, of the workloads (kind, name and labels), those rp
// selects but the first policy by name of policies stages instead.
func ignoredBy(rp *v1alpha1.RolloutPolicy, policies []*v1alpha1.RolloutPolicy, workloads []workloadLabels) []ignored {
	var out []ignored
	for _, w := range workloads {
		if !waves.Selects(rp, w.labels) {
			continue
		}
		if owner := waves.PolicyFor(policies, w.labels); owner != nil && owner.Name != rp.Name {
			out = append(out, ignored{workload: w.id, stagedBy: owner.Name})
		}
	}
	return out
}

type workloadLabels struct {
	id     waves.Workload
	labels map[string]string
}

// setOverlapping records in conds whether rp ignores workloads another
// policy stages: True naming them, False once none is left (nothing when
// there never was one). It returns the message of a True condition that
// is new or changed, for an event; "" otherwise.
func setOverlapping(conds *[]metav1.Condition, generation int64, ign []ignored) string {
	prev := meta.FindStatusCondition(*conds, v1alpha1.ConditionOverlapping)
	if len(ign) == 0 {
		if prev != nil {
			meta.SetStatusCondition(conds, metav1.Condition{Type: v1alpha1.ConditionOverlapping, Status: metav1.ConditionFalse,
				Reason: ReasonNoOverlap, Message: "no other policy stages a workload this one selects", ObservedGeneration: generation})
		}
		return ""
	}
	var names []string
	for _, i := range ign[:min(len(ign), maxNamedOverlaps)] {
		names = append(names, fmt.Sprintf("%s %s (staged by RolloutPolicy %s)", i.workload.Kind, i.workload.Name, i.stagedBy))
	}
	if len(ign) > maxNamedOverlaps {
		names = append(names, fmt.Sprintf("%d more", len(ign)-maxNamedOverlaps))
	}
	msg := "this policy selects workloads another policy of the namespace stages (the first by name whose selector matches does), and ignores them: " +
		strings.Join(names, ", ") + ". Narrow one of the selectors so each workload has one policy"
	changed := prev == nil || prev.Status != metav1.ConditionTrue || prev.Message != msg
	meta.SetStatusCondition(conds, metav1.Condition{Type: v1alpha1.ConditionOverlapping, Status: metav1.ConditionTrue,
		Reason: ReasonStagedByAnother, Message: msg, ObservedGeneration: generation})
	if changed {
		return msg
	}
	return ""
}
