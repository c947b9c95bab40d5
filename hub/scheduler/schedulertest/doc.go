// Package schedulertest gives scheduler tests and benchmarks a fake
// clientset whose pods/binding behaves as the hub's does: it sets
// spec.nodeName and PodScheduled=True, refuses a pod that is already
// bound (409) or gone (404), and counts bindings.
package schedulertest
