// Package openapi owns the OpenAPI documents the hub serves: /openapi/v2
// (JSON, or protobuf when asked) and /openapi/v3 with one document per
// group-version. kubectl needs them: apply checks in them that the server
// declares the fieldValidation parameter before it leaves validation to the
// server, and explain reads its field docs from them.
//
// The schemas are generated from the Go types (k8s.io/api, apimachinery and
// api/v1alpha1) by kube-openapi's openapi-gen into zz_generated.openapi.go;
// the paths are built from the served-resource table (api.Resources), so the
// documents describe exactly the REST paths the apiserver serves.
//
//go:generate bash gen.sh
package openapi
