// Package loader turns the files of one commit into Kubernetes objects:
// *.yaml, *.yml and *.json files (multi-document) under the source's paths,
// kustomizations built with kustomize, and .flotillaignore files. Every
// object remembers the file and line it came from, and every error names
// them, so that a broken commit can be reported precisely.
package loader
