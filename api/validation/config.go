package validation

import (
	"encoding/json"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api"
)

// MaxDataSize bounds the data of one ConfigMap or Secret, as in Kubernetes.
const MaxDataSize = api.MaxObjectSize

const immutableMsg = "field is immutable when `immutable` is set"

// validateKeys checks the keys of a ConfigMap's or Secret's data; values
// are never echoed back, since they may be secret.
func validateKeys[V any](m map[string]V, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range sortedKeys(m) {
		errs = appendMsgs(errs, path.Key(k), k, utilvalidation.IsConfigMapKey(k))
	}
	return errs
}

func validateConfigMap(cm *corev1.ConfigMap) field.ErrorList {
	errs := objectMeta(&cm.ObjectMeta, true, nameIsDNSSubdomain)
	return append(errs, validateConfigMapData(cm)...)
}

func validateConfigMapData(cm *corev1.ConfigMap) field.ErrorList {
	dp, bp := field.NewPath("data"), field.NewPath("binaryData")
	errs := validateKeys(cm.Data, dp)
	errs = append(errs, validateKeys(cm.BinaryData, bp)...)
	size := 0
	for k, v := range cm.Data {
		size += len(k) + len(v)
	}
	for _, k := range sortedKeys(cm.BinaryData) {
		size += len(k) + len(cm.BinaryData[k])
		if _, dup := cm.Data[k]; dup {
			errs = append(errs, field.Invalid(bp.Key(k), k, "duplicate of key present in data"))
		}
	}
	if size > MaxDataSize {
		errs = append(errs, field.TooLong(dp, "", MaxDataSize))
	}
	return errs
}

func validateConfigMapUpdate(cm, old *corev1.ConfigMap) field.ErrorList {
	errs := validateConfigMapData(cm)
	if old.Immutable != nil && *old.Immutable {
		if cm.Immutable == nil || !*cm.Immutable {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), immutableMsg))
		}
		if !reflect.DeepEqual(cm.Data, old.Data) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), immutableMsg))
		}
		if !reflect.DeepEqual(cm.BinaryData, old.BinaryData) {
			errs = append(errs, field.Forbidden(field.NewPath("binaryData"), immutableMsg))
		}
	}
	return errs
}

func validateSecret(s *corev1.Secret) field.ErrorList {
	errs := objectMeta(&s.ObjectMeta, true, nameIsDNSSubdomain)
	return append(errs, validateSecretData(s)...)
}

func validateSecretData(s *corev1.Secret) field.ErrorList {
	dp := field.NewPath("data")
	errs := validateKeys(s.Data, dp)
	errs = append(errs, validateKeys(s.StringData, field.NewPath("stringData"))...)
	size := 0
	for k, v := range s.Data {
		size += len(k) + len(v)
	}
	if size > MaxDataSize {
		errs = append(errs, field.TooLong(dp, "", MaxDataSize))
	}
	need := func(keys ...string) {
		for _, k := range keys {
			if _, ok := s.Data[k]; !ok {
				errs = append(errs, field.Required(dp.Key(k), ""))
			}
		}
	}
	jsonKey := func(k string) {
		if v, ok := s.Data[k]; !ok {
			errs = append(errs, field.Required(dp.Key(k), ""))
		} else if !json.Valid(v) {
			errs = append(errs, field.Invalid(dp.Key(k), "<secret contents redacted>", "must be valid JSON"))
		}
	}
	switch s.Type {
	case corev1.SecretTypeServiceAccountToken:
		if s.Annotations[corev1.ServiceAccountNameKey] == "" {
			errs = append(errs, field.Required(metaPath.Child("annotations").Key(corev1.ServiceAccountNameKey), ""))
		}
	case corev1.SecretTypeDockercfg:
		jsonKey(corev1.DockerConfigKey)
	case corev1.SecretTypeDockerConfigJson:
		jsonKey(corev1.DockerConfigJsonKey)
	case corev1.SecretTypeBasicAuth:
		_, u := s.Data[corev1.BasicAuthUsernameKey]
		_, p := s.Data[corev1.BasicAuthPasswordKey]
		if !u && !p {
			need(corev1.BasicAuthUsernameKey, corev1.BasicAuthPasswordKey)
		}
	case corev1.SecretTypeSSHAuth:
		need(corev1.SSHAuthPrivateKey)
	case corev1.SecretTypeTLS:
		need(corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	case "":
		errs = append(errs, field.Required(field.NewPath("type"), ""))
	}
	return errs
}

func validateSecretUpdate(s, old *corev1.Secret) field.ErrorList {
	errs := validateSecretData(s)
	errs = immutable(errs, field.NewPath("type"), s.Type, old.Type)
	if old.Immutable != nil && *old.Immutable {
		if s.Immutable == nil || !*s.Immutable {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), immutableMsg))
		}
		if !reflect.DeepEqual(s.Data, old.Data) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), immutableMsg))
		}
	}
	return errs
}
