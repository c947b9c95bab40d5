package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RolloutPolicy stages the rollout of the DaemonSets and Deployments it
// selects: a new template reaches the devices of one wave at a time, the
// next wave only once the current one meets the success criteria.
type RolloutPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RolloutPolicySpec   `json:"spec,omitempty"`
	Status RolloutPolicyStatus `json:"status,omitempty"`
}

// RolloutPolicySpec says which workloads roll out how.
type RolloutPolicySpec struct {
	// Selector picks the DaemonSets and Deployments of this namespace, by
	// their labels, whose template changes roll out in waves.
	Selector *metav1.LabelSelector `json:"selector"`
	// Waves in order. A device belongs to the first wave that takes it;
	// devices no wave takes get the new version once every wave has
	// succeeded.
	// +listType=map
	// +listMapKey=name
	Waves []RolloutWave `json:"waves"`
	// SuccessCriteria decide when a wave is done and when it has failed.
	SuccessCriteria SuccessCriteria `json:"successCriteria,omitempty"`
	// OnFailure is what a failed wave leads to: Pause (the default) holds
	// every device where it is; Rollback puts the wave's devices back on
	// the previous version.
	OnFailure RolloutFailureAction `json:"onFailure,omitempty"`
	// Paused holds every rollout of the policy where it is: no further
	// device gets the new version until it is false again. It is named as
	// a Deployment's spec.paused, which `kubectl rollout pause` sets, so
	// that the same word means the same thing on both.
	Paused bool `json:"paused,omitempty"`
}

// RolloutWave is one step of a rollout. It takes the devices its
// nodeSelector matches, or percent of the devices no earlier wave took, or,
// with neither, every device left; only the last wave may have neither.
type RolloutWave struct {
	Name string `json:"name"`
	// NodeSelector takes the devices (Nodes) whose labels match.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Percent (1..100) takes that share of the devices no earlier wave
	// took, rounded up, chosen by a hash of the device's name and the
	// workload so the same devices are chosen every time.
	Percent *int32 `json:"percent,omitempty"`
}

// SuccessCriteria decide a wave's outcome.
type SuccessCriteria struct {
	// ReadySeconds each device of the wave must be Ready on the new
	// version (default 60).
	ReadySeconds *int32 `json:"readySeconds,omitempty"`
	// MaxFailures is how many devices of a wave may fail, a count or a
	// percentage of the wave's devices ("5%", rounded down) (default 0).
	MaxFailures *intstr.IntOrString `json:"maxFailures,omitempty"`
	// TimeoutSeconds after the wave started, a device not yet Ready on the
	// new version has failed (default 600).
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// RolloutFailureAction is what a failed wave leads to.
type RolloutFailureAction string

const (
	RolloutFailurePause    RolloutFailureAction = "Pause"
	RolloutFailureRollback RolloutFailureAction = "Rollback"
)

// RolloutPhase is where one workload's rollout stands.
type RolloutPhase string

const (
	// RolloutProgressing: the current wave is being updated or watched.
	RolloutProgressing RolloutPhase = "Progressing"
	// RolloutPaused: held, by spec.paused or by a failed wave with
	// onFailure Pause.
	RolloutPaused RolloutPhase = "Paused"
	// RolloutRolledBack: a wave failed and its devices went back to the
	// previous version; the rollout stays so until the template changes.
	RolloutRolledBack RolloutPhase = "RolledBack"
	// RolloutComplete: every device may run the new version.
	RolloutComplete RolloutPhase = "Complete"
)

// RolloutPolicyStatus reports the rollout of each selected workload.
type RolloutPolicyStatus struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Workloads are the selected workloads' rollouts, by kind and name.
	// +listType=atomic
	Workloads []WorkloadRollout `json:"workloads,omitempty"`
	// Conditions are the policy's own: Overlapping is True while a
	// workload it selects is staged by another policy of the namespace
	// (the first by name whose selector matches), so this one ignores it.
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WorkloadRollout is the rollout of one workload's current template.
type WorkloadRollout struct {
	// Kind is DaemonSet or Deployment.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// ObservedGeneration is the workload's metadata.generation this
	// status is about: a client following a rollout knows the status
	// answers the latest template once it has caught up.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Revision is the controller-revision-hash of the template being
	// rolled out, and RevisionNumber its ControllerRevision's number.
	Revision       string `json:"revision"`
	RevisionNumber int64  `json:"revisionNumber,omitempty"`
	// PreviousRevision is the hash of the version devices keep until
	// their wave is admitted ("" when there was none: the first version
	// of a workload goes everywhere at once).
	PreviousRevision string `json:"previousRevision,omitempty"`
	// CurrentWave names the wave being updated or watched, the one that
	// failed, or "" when complete.
	CurrentWave string       `json:"currentWave,omitempty"`
	Phase       RolloutPhase `json:"phase"`
	StartTime   *metav1.Time `json:"startTime,omitempty"`
	Waves       []WaveStatus `json:"waves,omitempty"`
	Message     string       `json:"message,omitempty"`
	// LastHandledRetryAt is the value of the workload's
	// AnnotationRolloutRetryRequestedAt the rollout loop last answered: a
	// failed wave it finds with another value is judged again.
	LastHandledRetryAt string `json:"lastHandledRetryAt,omitempty"`
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AnnotationRolloutRetryRequestedAt, on a staged DaemonSet or Deployment,
// asks the rollout loop to judge its failed wave again (flotctl rollout
// retry sets it to the time): any new value is a new request, answered
// in status.workloads[].lastHandledRetryAt. A request that finds no
// failed wave is answered and does nothing.
const AnnotationRolloutRetryRequestedAt = "flotilla.dev/rollout-retry-requested-at"

// WaveStatus is one wave's progress.
type WaveStatus struct {
	Name string `json:"name"`
	// Devices is how many devices the wave took.
	Devices int32 `json:"devices"`
	// Done is how many have been Ready on the new version for
	// readySeconds; Failed how many failed.
	Done   int32 `json:"done"`
	Failed int32 `json:"failed"`
	// StartTime is when the wave was admitted.
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// FailedDevices names failed devices and why (at most
	// MaxReportedFailures of them).
	FailedDevices []DeviceFailure `json:"failedDevices,omitempty"`
}

// MaxReportedFailures bounds WaveStatus.FailedDevices, so a wave of
// thousands of failing devices does not make the object huge.
const MaxReportedFailures = 20

// DeviceFailure is why one device failed its wave.
type DeviceFailure struct {
	Node string `json:"node"`
	// Reason is one word: NotReadyInTime, CrashLoopBackOff, ImagePullBackOff,
	// PodFailed...
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// Condition types of a workload's rollout.
const (
	// ConditionWaveFailed is True when a wave failed its criteria.
	ConditionWaveFailed = "WaveFailed"
	// ConditionOverlapping, a policy's condition, is True when another
	// policy stages a workload this one selects.
	ConditionOverlapping = "Overlapping"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RolloutPolicyList is a list of RolloutPolicies.
type RolloutPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RolloutPolicy `json:"items"`
}
