#!/usr/bin/env bash
# Regenerates zz_generated.openapi.go: the OpenAPI schemas of every type the
# hub serves, from the Go types and their comment tags (+listType,
# +patchMergeKey, ...). Run it after changing api/v1alpha1 or bumping k8s.io/api.
# The generator runs at the kube-openapi version go.mod requires, so the
# generated code always matches the library that serves it.
set -euo pipefail
cd "$(dirname "$0")/../../.."

version=$(go list -m -f '{{.Version}}' k8s.io/kube-openapi)
report=$(mktemp)
trap 'rm -f "$report"' EXIT

# The API-rule report lists naming and list-type lint findings; they are not
# errors for us (k8s.io/api itself has some), so it is discarded.
go run "k8s.io/kube-openapi/cmd/openapi-gen@${version}" \
	--output-dir hub/apiserver/openapi \
	--output-pkg flotilla.dev/flotilla/hub/apiserver/openapi \
	--output-file zz_generated.openapi.go \
	--go-header-file /dev/null \
	--report-filename "$report" \
	k8s.io/api/core/v1 \
	k8s.io/api/apps/v1 \
	k8s.io/api/coordination/v1 \
	k8s.io/api/discovery/v1 \
	k8s.io/api/batch/v1 \
	k8s.io/api/scheduling/v1 \
	k8s.io/api/scheduling/v1alpha3 \
	k8s.io/apimachinery/pkg/apis/meta/v1 \
	k8s.io/apimachinery/pkg/api/resource \
	k8s.io/apimachinery/pkg/util/intstr \
	k8s.io/apimachinery/pkg/runtime \
	flotilla.dev/flotilla/api/v1alpha1
gofmt -w hub/apiserver/openapi/zz_generated.openapi.go
