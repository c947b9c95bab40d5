package loader

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

func unstructuredString(o Object, fields ...string) (string, bool, error) {
	return unstructured.NestedString(o.Obj.Object, fields...)
}
