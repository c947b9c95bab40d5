// Package apiserver is the hub's Kubernetes-compatible REST API: discovery,
// CRUD with optimistic concurrency, the status and binding subresources,
// patches as kubectl sends them, server-side apply with managedFields
// (apimachinery's field manager, typed by the served OpenAPI schemas),
// graceful deletion with finalizers, and watches served from an in-memory
// watch cache fed by the store.
//
// It is built so that client-go's typed clients and informers, and kubectl,
// work against it unchanged, without embedding k8s.io/apiserver: the hub
// must stay small enough for a modest machine serving thousands of devices.
//
// A request passes authentication (Authenticator), authorization
// (Authorizer), decoding, defaulting and admission (api/defaults,
// api/validation, the service IP allocator), then the store. Every
// read of a list or watch is answered from the watch cache, which follows
// the store's own watch and holds each object already encoded, so that one
// event is serialized once for every watcher.
package apiserver
