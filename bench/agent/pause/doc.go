// Command pause is the sandbox image's process for the upstream kubelet
// that `make bench` measures: it holds a pod's namespaces, reaps the
// children it inherits as the pod's init and exits on SIGTERM or SIGINT,
// which is all the CRI plugin asks of Kubernetes' pause image. It is
// built here because that image would come from the internet.
package main
