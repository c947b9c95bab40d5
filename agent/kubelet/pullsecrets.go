package kubelet

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"flotilla.dev/flotilla/registry"
)

// pullKeychain gathers the credentials of the pod's image pull secrets,
// the first secret naming a registry winning. As the kubelet does, a
// secret that cannot be read or parsed is reported with a Warning and
// left out: the pull is tried anyway, since the registry may not need it
// (or the registries configuration has credentials for it).
func (k *Kubelet) pullKeychain(ctx context.Context, pod *corev1.Pod, container string) registry.Keychain {
	if len(pod.Spec.ImagePullSecrets) == 0 || k.objects == nil {
		return nil
	}
	var keys registry.Keychain
	var failed []string
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		s, err := k.objects.Secret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", ref.Name, err))
			continue
		}
		got, err := secretKeychain(s)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", ref.Name, err))
			continue
		}
		keys = keys.Merge(got)
	}
	if len(failed) > 0 {
		k.event(pod, container, corev1.EventTypeWarning, "FailedToRetrieveImagePullSecret",
			"Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(failed, "; "))
	}
	return keys
}

// secretKeychain reads an image pull secret of either Docker config type.
func secretKeychain(s *corev1.Secret) (registry.Keychain, error) {
	var key string
	switch s.Type {
	case corev1.SecretTypeDockerConfigJson:
		key = corev1.DockerConfigJsonKey
	case corev1.SecretTypeDockercfg:
		key = corev1.DockerConfigKey
	default:
		return nil, fmt.Errorf("type %q is not %s or %s", s.Type, corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockercfg)
	}
	data, ok := s.Data[key]
	if !ok {
		return nil, fmt.Errorf("no %s key", key)
	}
	return registry.ParseDockerConfig(data)
}
