// Package gitops holds the hub's GitOps machinery: a GitSource's commit is
// fetched (source), turned into objects (loader), validated as a whole and
// applied through the hub's API (applier) by a reconcile loop that also
// receives webhooks (controller).
package gitops
