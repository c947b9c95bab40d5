// Package gitopsbench measures the GitOps path on a generated repository:
// the first apply, a no-op poll, one changed file, and go-git's fetch
// beside git's own (time and peak RSS). `make bench` calls Run.
package gitopsbench
