package controllerutil

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/apimachinery/pkg/util/rand"
)

// ComputeHash is the hash that names a pod template's revision (a
// Deployment's pod-template-hash, a DaemonSet's controller-revision-hash):
// FNV-32a over the template printed by the same deterministic printer
// Kubernetes uses, plus the collision count, encoded into safe characters.
// The same template gives the same hash on every hub and across restarts.
func ComputeHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	h.Write([]byte(dump.ForHash(*template)))
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		h.Write(b)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}
