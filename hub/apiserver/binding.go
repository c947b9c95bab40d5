package apiserver

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
)

// handleBinding assigns a pod to a node, once: a second binding is a
// conflict, so that two schedulers can never both place one pod.
func (s *Server) handleBinding(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	data, err := bodyToJSON(r, body)
	if err != nil {
		return err
	}
	var b corev1.Binding
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &b); err != nil {
		return badRequest("the request body is not a valid Binding: %v", err)
	}
	if b.Name != "" && b.Name != ri.Name {
		return badRequest("the Binding's name (%s) does not match the pod's (%s)", b.Name, ri.Name)
	}
	var errs field.ErrorList
	if b.Target.Name == "" {
		errs = append(errs, field.Required(field.NewPath("target", "name"), "the name of the node to bind to"))
	}
	if b.Target.Kind != "" && b.Target.Kind != "Node" {
		errs = append(errs, field.NotSupported(field.NewPath("target", "kind"), b.Target.Kind, []string{"Node"}))
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Binding").GroupKind(), ri.Name, errs)
	}
	dry, err := isDryRun(r)
	if err != nil {
		return err
	}
	_, _, _, err = s.update(r.Context(), ri.Resource, ri.Namespace, ri.Name, "internal", dry, owner{}, func(cur runtime.Object) (runtime.Object, error) {
		pod := cur.(*corev1.Pod)
		if b.UID != "" && b.UID != pod.UID {
			return nil, conflict(ri, fmt.Sprintf("the Binding is for pod uid %s, but the pod's uid is %s", b.UID, pod.UID))
		}
		if pod.DeletionTimestamp != nil {
			return nil, conflict(ri, fmt.Sprintf("pod %s is being deleted, cannot be assigned to a host", pod.Name))
		}
		if pod.Spec.NodeName != "" {
			return nil, conflict(ri, fmt.Sprintf("pod %s is already assigned to node %q", pod.Name, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = b.Target.Name
		setPodCondition(&pod.Status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
		return pod, nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess, Code: http.StatusCreated})
	return nil
}

func setPodCondition(st *corev1.PodStatus, c corev1.PodCondition) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == c.Type {
			if st.Conditions[i].Status == c.Status {
				c.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}
