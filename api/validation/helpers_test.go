package validation

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api/defaults"
)

const (
	digest  = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	digest2 = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	image   = "registry.local/shop/app@" + digest
	image2  = "registry.local/shop/app@" + digest2
)

// want is one expected error: its type and its field path.
type want struct {
	typ   field.ErrorType
	field string
}

func (w want) String() string { return fmt.Sprintf("%s %s", w.field, w.typ) }

func required(f string) want     { return want{field.ErrorTypeRequired, f} }
func invalid(f string) want      { return want{field.ErrorTypeInvalid, f} }
func duplicate(f string) want    { return want{field.ErrorTypeDuplicate, f} }
func notSupported(f string) want { return want{field.ErrorTypeNotSupported, f} }
func forbidden(f string) want    { return want{field.ErrorTypeForbidden, f} }
func notFound(f string) want     { return want{field.ErrorTypeNotFound, f} }
func tooLong(f string) want      { return want{field.ErrorTypeTooLong, f} }
func tooMany(f string) want      { return want{field.ErrorTypeTooMany, f} }
func internal(f string) want     { return want{field.ErrorTypeInternal, f} }

// expectErrors asserts that errs holds exactly the wanted errors, in any
// order.
func expectErrors(t *testing.T, errs field.ErrorList, wants ...want) {
	t.Helper()
	var got, exp []string
	for _, e := range errs {
		got = append(got, want{e.Type, e.Field}.String())
	}
	for _, w := range wants {
		exp = append(exp, w.String())
	}
	sort.Strings(got)
	sort.Strings(exp)
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("errors:\n  got  %v\n  want %v\nfull errors:\n  %s", got, exp, joinErrs(errs))
	}
}

func joinErrs(errs field.ErrorList) string {
	var s []string
	for _, e := range errs {
		s = append(s, e.Error())
	}
	return strings.Join(s, "\n  ")
}

func defaulted[T runtime.Object](o T) T {
	defaults.Default(o)
	return o
}

func validPod() *corev1.Pod {
	return defaulted(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "app",
				Image: image,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			}},
		},
	})
}

// stored makes o look like an object read back from the hub, as
// ValidateUpdate expects old and new to be.
func stored[T interface {
	runtime.Object
	metav1.Object
}](o T) T {
	o.SetResourceVersion("7")
	o.SetUID("0b6c7a52-8a3c-4c33-9a0b-6f4f3b0f8e11")
	o.SetGeneration(1)
	return o
}
