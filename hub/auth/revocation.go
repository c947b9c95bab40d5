package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/apiserver"
)

// A revocation is a ConfigMap in flotilla-system, one per user, so that
// every hub on a shared store sees it through its own watch, an admin can
// list it with kubectl, and deleting it undoes it.
const (
	// LabelRevocation marks the ConfigMaps that revoke certificates.
	LabelRevocation = "flotilla.dev/revocation"
	// RevocationNamespace holds them.
	RevocationNamespace = api.NamespaceSystem

	keyUser      = "user"
	keyRevokedAt = "revokedAt"
	keyReason    = "reason"
)

// ErrRevoked is wrapped by the errors of certificates issued before their
// user's credentials were revoked.
var ErrRevoked = errors.New("certificate revoked")

// Revocation refuses every certificate of User issued before RevokedAt.
// Certificates carry their issue time to the second, so the whole second
// of RevokedAt is refused; a certificate for the user issued after it is
// accepted (a device that joins again with a new token, a person given a
// new kubeconfig).
type Revocation struct {
	User      string
	RevokedAt time.Time
	Reason    string
}

// RevocationName is the name of the ConfigMap holding user's revocation.
// User names may hold characters object names may not (system:node:x).
func RevocationName(user string) string {
	sum := sha256.Sum256([]byte(user))
	return "revoked-" + hex.EncodeToString(sum[:10])
}

// ConfigMap is the object that stores r.
func (r Revocation) ConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      RevocationName(r.User),
			Namespace: RevocationNamespace,
			Labels:    map[string]string{LabelRevocation: "true"},
		},
		Data: map[string]string{
			keyUser:      r.User,
			keyRevokedAt: r.RevokedAt.UTC().Format(time.RFC3339Nano),
			keyReason:    r.Reason,
		},
	}
}

// RevocationFrom reads a revocation ConfigMap. A damaged one (edited by
// hand) still revokes its user, from the end of time, so that a typo
// never lets a revoked certificate back in; only one that names no user
// is an error.
func RevocationFrom(cm *corev1.ConfigMap) (Revocation, error) {
	r := Revocation{User: cm.Data[keyUser], Reason: cm.Data[keyReason]}
	if r.User == "" {
		return r, fmt.Errorf("revocation %s/%s names no user (data.%s)", cm.Namespace, cm.Name, keyUser)
	}
	at, err := time.Parse(time.RFC3339Nano, cm.Data[keyRevokedAt])
	if err != nil {
		r.RevokedAt = time.Unix(1<<40, 0)
		return r, fmt.Errorf("revocation %s/%s of %q: data.%s %q is not an RFC 3339 time (all of the user's certificates are refused until it is fixed): %w",
			cm.Namespace, cm.Name, r.User, keyRevokedAt, cm.Data[keyRevokedAt], err)
	}
	r.RevokedAt = at
	return r, nil
}

// Covers reports whether r refuses a certificate of its user issued at
// issuedAt (second precision, see Revocation).
func (r Revocation) Covers(issuedAt time.Time) bool {
	return issuedAt.Before(r.RevokedAt.Truncate(time.Second).Add(time.Second))
}

// NotBefore is the first moment a new certificate for the user may be
// issued and escape r.
func (r Revocation) NotBefore() time.Time { return r.RevokedAt.Truncate(time.Second).Add(time.Second) }

// Revoke records r through client, or moves an existing revocation of the
// same user forward; it never moves one back.
func Revoke(ctx context.Context, client kubernetes.Interface, r Revocation) error {
	cms := client.CoreV1().ConfigMaps(RevocationNamespace)
	want := r.ConfigMap()
	for range 20 {
		cur, err := cms.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, want, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("revoking the certificates of %s: %w", r.User, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("revoking the certificates of %s: reading %s: %w", r.User, want.Name, err)
		}
		if old, err := RevocationFrom(cur); err == nil && old.User == r.User && !old.RevokedAt.Before(r.RevokedAt) {
			return nil
		}
		next := cur.DeepCopy()
		next.Labels, next.Data = want.Labels, want.Data
		_, err = cms.Update(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("revoking the certificates of %s: %w", r.User, err)
		}
		return nil
	}
	return fmt.Errorf("revoking the certificates of %s: too many concurrent changes to %s/%s; retry", r.User, RevocationNamespace, want.Name)
}

// GetRevocation reads user's revocation through client (a consistent read,
// unlike Revocations' watch); ok is false when there is none.
func GetRevocation(ctx context.Context, client kubernetes.Interface, user string) (r Revocation, ok bool, err error) {
	cm, err := client.CoreV1().ConfigMaps(RevocationNamespace).Get(ctx, RevocationName(user), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Revocation{}, false, nil
	}
	if err != nil {
		return Revocation{}, false, fmt.Errorf("reading the revocation of %s: %w", user, err)
	}
	r, _ = RevocationFrom(cm) // a damaged one refuses from the end of time
	if r.User != user {
		// Not a well-formed revocation of this user: refuse, to be safe.
		return Revocation{User: user, RevokedAt: time.Unix(1<<40, 0)}, true, nil
	}
	return r, true, nil
}

// ListRevocations lists every revocation through client, sorted by user.
// Damaged ones are listed too, with the error that describes them.
func ListRevocations(ctx context.Context, client kubernetes.Interface) ([]Revocation, []error, error) {
	l, err := client.CoreV1().ConfigMaps(RevocationNamespace).List(ctx, metav1.ListOptions{LabelSelector: LabelRevocation + "=true"})
	if err != nil {
		return nil, nil, fmt.Errorf("listing revocations: %w", err)
	}
	var out []Revocation
	var errs []error
	for i := range l.Items {
		r, err := RevocationFrom(&l.Items[i])
		if err != nil {
			errs = append(errs, err)
		}
		if r.User != "" {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].User < out[j].User })
	return out, errs, nil
}

// Revocations is the hub's view of every revocation, kept by a watch; the
// authenticator asks it about each request's certificate. It is safe for
// concurrent use.
type Revocations struct {
	// SyncWait bounds how long Check waits for the first list (default
	// five seconds); a certificate is not accepted before it.
	SyncWait time.Duration
	Log      *slog.Logger

	mu     sync.RWMutex
	byName map[string]Revocation // by ConfigMap name
	byUser map[string]Revocation
	synced chan struct{}
	once   sync.Once
}

// NewRevocations returns an empty list; Run fills it, tests call Set and
// MarkSynced.
func NewRevocations() *Revocations {
	return &Revocations{byName: map[string]Revocation{}, byUser: map[string]Revocation{}, synced: make(chan struct{})}
}

// Set records a revocation stored under the ConfigMap name.
func (v *Revocations) Set(name string, r Revocation) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.removeLocked(name)
	v.byName[name] = r
	if old, ok := v.byUser[r.User]; !ok || old.RevokedAt.Before(r.RevokedAt) {
		v.byUser[r.User] = r
	}
}

// Remove forgets the revocation stored under name.
func (v *Revocations) Remove(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.removeLocked(name)
}

func (v *Revocations) removeLocked(name string) {
	old, ok := v.byName[name]
	if !ok {
		return
	}
	delete(v.byName, name)
	delete(v.byUser, old.User)
	// Another ConfigMap may revoke the same user (one copied by hand).
	for _, r := range v.byName {
		if r.User == old.User {
			if cur, ok := v.byUser[r.User]; !ok || cur.RevokedAt.Before(r.RevokedAt) {
				v.byUser[r.User] = r
			}
		}
	}
}

// ErrRevocationsLoading is Check's answer while the first list has not
// loaded: it cannot tell yet whether a certificate is revoked.
var ErrRevocationsLoading = errors.New("the hub has not loaded its list of revoked certificates yet; retry in a moment")

// MarkSynced says the list holds every revocation.
func (v *Revocations) MarkSynced() { v.once.Do(func() { close(v.synced) }) }

// Check refuses a certificate of user issued at issuedAt if the user's
// credentials were revoked after. Until the first list has loaded it
// waits (SyncWait at most), and then refuses too: a revoked device must
// not slip in while the hub starts.
func (v *Revocations) Check(user string, issuedAt time.Time) error {
	select {
	case <-v.synced:
	default:
		wait := v.SyncWait
		if wait <= 0 {
			wait = 5 * time.Second
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-v.synced:
		case <-t.C:
			return ErrRevocationsLoading
		}
	}
	v.mu.RLock()
	r, ok := v.byUser[user]
	v.mu.RUnlock()
	if !ok || !r.Covers(issuedAt) {
		return nil
	}
	how := "ask an admin for a new kubeconfig (flotilla-hub kubeconfig create)"
	if strings.HasPrefix(user, NodePrefix) {
		how = "the device must join again with a new token (flotilla-agent join)"
	}
	reason := ""
	if r.Reason != "" {
		reason = " (" + r.Reason + ")"
	}
	return fmt.Errorf("%w: the certificate of %s was issued at %s, and the credentials of %s were revoked at %s%s; %s",
		ErrRevoked, user, issuedAt.UTC().Format(time.RFC3339), user, r.RevokedAt.UTC().Format(time.RFC3339), reason, how)
}

func (v *Revocations) log() *slog.Logger {
	if v.Log != nil {
		return v.Log
	}
	return slog.Default()
}

func (v *Revocations) onConfigMap(o any) {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok {
		return
	}
	r, err := RevocationFrom(cm)
	if err != nil {
		v.log().Error("damaged revocation", "err", err)
	}
	if r.User == "" {
		v.Remove(cm.Name)
		return
	}
	v.Set(cm.Name, r)
}

// Run keeps the list current from a watch through the API at cfg until
// ctx ends.
func (v *Revocations) Run(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("revocations: %w", err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithNamespace(RevocationNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelRevocation + "=true" }))
	inf := f.Core().V1().ConfigMaps().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    v.onConfigMap,
		UpdateFunc: func(_, o any) { v.onConfigMap(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if cm, ok := o.(*corev1.ConfigMap); ok {
				v.Remove(cm.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("revocations: %w", err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	v.MarkSynced()
	<-ctx.Done()
	f.Shutdown()
	return nil
}

// NodeRevoker revokes a device's certificates when its Node is deleted
// (apiserver.Config.BeforeDelete), so that the device can neither use the
// API nor renew nor register the name again; joining with a new token
// gives it a new certificate.
type NodeRevoker struct {
	// Client reaches the hub's API as its admin.
	Client kubernetes.Interface
	Now    func() time.Time
}

// BeforeDelete implements the hook: it runs before the Node is removed, so
// that no moment exists where the Node is gone and its device still in.
func (nr *NodeRevoker) BeforeDelete(ctx context.Context, obj runtime.Object) error {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return nil
	}
	now := time.Now
	if nr.Now != nil {
		now = nr.Now
	}
	by := "the hub"
	if u := apiserver.UserFrom(ctx); u != nil {
		by = u.Name
	}
	r := Revocation{User: NodePrefix + n.Name, RevokedAt: now(), Reason: fmt.Sprintf("Node %s was deleted by %s", n.Name, by)}
	if err := Revoke(ctx, nr.Client, r); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("the Node was not deleted, because its device's certificates could not be revoked: %w", err))
	}
	return nil
}
