package node

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api"
)

// leaseLoop renews the node's Lease every LeaseInterval. A failed renewal
// is retried sooner (backoff from 200 ms up to the interval), never given up.
func (n *Node) leaseLoop(ctx context.Context) {
	var lease *coordinationv1.Lease
	b := newBackoff(200*time.Millisecond, n.cfg.LeaseInterval)
	for {
		var err error
		lease, err = n.renew(ctx, lease)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			n.log.Warn("renewing the node lease failed; retrying", "err", err)
			lease = nil // re-read: the failure may have been a conflict
			if !b.wait(ctx) {
				return
			}
			continue
		}
		b.reset()
		t := time.NewTimer(n.cfg.LeaseInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// renew writes a new renewTime on the Lease (creating it when missing)
// and returns the Lease as written.
func (n *Node) renew(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := n.client.CoordinationV1().Leases(api.NamespaceNodeLease)
	if lease == nil {
		cur, err := leases.Get(ctx, n.cfg.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := leases.Create(ctx, n.newLease(), metav1.CreateOptions{})
			if err != nil {
				return nil, fmt.Errorf("creating lease %s/%s: %w", api.NamespaceNodeLease, n.cfg.Name, err)
			}
			return created, nil
		case err != nil:
			return nil, fmt.Errorf("reading lease %s/%s: %w", api.NamespaceNodeLease, n.cfg.Name, err)
		}
		lease = cur
	}
	upd := lease.DeepCopy()
	n.fillLease(upd)
	res, err := leases.Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("renewing lease %s/%s: %w", api.NamespaceNodeLease, n.cfg.Name, err)
	}
	return res, nil
}

func (n *Node) newLease() *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.cfg.Name, Namespace: api.NamespaceNodeLease}}
	n.fillLease(l)
	return l
}

// fillLease sets the holder, duration, renew time and, once the Node is
// known, the owner reference that lets the hub collect the Lease with it.
func (n *Node) fillLease(l *coordinationv1.Lease) {
	holder := n.cfg.Name
	dur := int32(n.cfg.LeaseDuration / time.Second)
	now := metav1.NewMicroTime(n.cfg.Now())
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &dur
	l.Spec.RenewTime = &now
	if l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &now
	}
	if node := n.Current(); node != nil && node.UID != "" {
		ref := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
		owned := false
		for i, r := range l.OwnerReferences {
			if r.Kind == "Node" && r.APIVersion == "v1" {
				l.OwnerReferences[i], owned = ref, true
			}
		}
		if !owned {
			l.OwnerReferences = append(l.OwnerReferences, ref)
		}
	}
}
