package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GitSource tells the hub to follow a Git repository and keep the objects
// under its paths applied.
type GitSource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GitSourceSpec   `json:"spec,omitempty"`
	Status GitSourceStatus `json:"status,omitempty"`
}

// GitSourceSpec is what to follow and how.
type GitSourceSpec struct {
	// URL of the repository: file://, https:// or ssh:// (or scp-like git@host:path).
	URL string `json:"url"`
	// Ref selects the commit to follow.
	Ref GitRef `json:"ref,omitempty"`
	// Paths inside the repository to load; empty means the whole tree.
	Paths []string `json:"paths,omitempty"`
	// Interval between polls (default 30s).
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Timeout of one fetch and apply (default 60s).
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Prune deletes objects that left the repository (default true).
	Prune *bool `json:"prune,omitempty"`
	// AllowEmpty permits a revision that would prune every object.
	AllowEmpty bool `json:"allowEmpty,omitempty"`
	// Suspend stops polling and applying; the applied objects stay.
	Suspend bool `json:"suspend,omitempty"`
	// SecretRef names a Secret in the source's namespace with credentials:
	// username/password or bearerToken for HTTPS, identity and known_hosts for SSH.
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// Verify, when set, refuses commits whose signature is not by a trusted key.
	Verify *GitVerification `json:"verify,omitempty"`
	// WebhookSecretRef names a Secret whose "token" key signs webhook calls.
	WebhookSecretRef *LocalObjectReference `json:"webhookSecretRef,omitempty"`
	// PruneOnDelete makes deleting the GitSource delete the objects of its
	// inventory too. By default they stay, unmanaged.
	PruneOnDelete bool `json:"pruneOnDelete,omitempty"`
}

// GitRef selects a branch, a tag or a fixed commit; the first one set wins
// in the order commit, tag, branch.
type GitRef struct {
	Branch string `json:"branch,omitempty"`
	Tag    string `json:"tag,omitempty"`
	Commit string `json:"commit,omitempty"`
}

// GitVerification names the keys trusted to sign commits.
type GitVerification struct {
	// Mode is "head": the followed commit must carry a good signature.
	Mode string `json:"mode,omitempty"`
	// SecretRef names a Secret whose values are armored GPG public keys or SSH
	// authorized_keys lines.
	SecretRef LocalObjectReference `json:"secretRef"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	Name string `json:"name"`
}

// GitSourceStatus says which commit is applied and why the latest is not.
type GitSourceStatus struct {
	ObservedGeneration  int64              `json:"observedGeneration,omitempty"`
	Conditions          []metav1.Condition `json:"conditions,omitempty"`
	LastAttemptedCommit string             `json:"lastAttemptedCommit,omitempty"`
	LastAppliedCommit   string             `json:"lastAppliedCommit,omitempty"`
	LastAppliedTime     *metav1.Time       `json:"lastAppliedTime,omitempty"`
	Message             string             `json:"message,omitempty"`
	// LastHandledReconcileAt is the value of the reconcile request
	// annotation (see ReconcileRequest) that the last finished reconcile
	// saw; it is written together with that reconcile's outcome, so a
	// client that set the annotation knows the rest of the status answers
	// its request once this field equals it.
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
	// Inventory lists every object applied from the last applied commit; only
	// these are ever pruned.
	Inventory []InventoryEntry `json:"inventory,omitempty"`
	// History holds the last attempts, newest first (at most 10).
	History []Attempt `json:"history,omitempty"`
	// Errors lists every problem of the last attempted commit: the file
	// and line, the object, and what is wrong. Empty after a success.
	Errors []SourceError `json:"errors,omitempty"`
}

// SourceError is one problem found in a revision.
type SourceError struct {
	// File is the path in the repository ("" when the error is not about
	// a file).
	File string `json:"file,omitempty"`
	// Line is where in File (1-based; 0 when unknown).
	Line int `json:"line,omitempty"`
	// Object names the object: "Kind namespace/name".
	Object  string `json:"object,omitempty"`
	Message string `json:"message"`
}

// InventoryEntry identifies one applied object.
type InventoryEntry struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

// Attempt records one reconcile of a commit.
type Attempt struct {
	Commit    string      `json:"commit"`
	Time      metav1.Time `json:"time"`
	Result    string      `json:"result"`
	Message   string      `json:"message,omitempty"`
	Duration  string      `json:"duration,omitempty"`
	Created   int         `json:"created"`
	Updated   int         `json:"updated"`
	Pruned    int         `json:"pruned"`
	Unchanged int         `json:"unchanged"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GitSourceList is a list of GitSources.
type GitSourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitSource `json:"items"`
}

// Annotations that ask the hub to reconcile a GitSource now, without
// waiting for the next poll: any new value is a new request. Flux's name
// is accepted too, so that tools and habits made for Flux work unchanged.
const (
	AnnotationReconcileRequestedAt     = "flotilla.dev/reconcile-requested-at"
	AnnotationFluxReconcileRequestedAt = "reconcile.fluxcd.io/requestedAt"
)

// ReconcileRequest is the pending reconcile request that annotations
// carry ("" for none): the Flotilla annotation, unless only Flux's is set
// or both are RFC 3339 times and Flux's is the later one. Writers set a
// timestamp; the hub only compares values, so any string works.
func ReconcileRequest(annotations map[string]string) string {
	own, flux := annotations[AnnotationReconcileRequestedAt], annotations[AnnotationFluxReconcileRequestedAt]
	switch {
	case flux == "":
		return own
	case own == "":
		return flux
	}
	to, err1 := time.Parse(time.RFC3339Nano, own)
	tf, err2 := time.Parse(time.RFC3339Nano, flux)
	if err1 == nil && err2 == nil && tf.After(to) {
		return flux
	}
	return own
}

// Condition types and reasons of a GitSource.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
)
