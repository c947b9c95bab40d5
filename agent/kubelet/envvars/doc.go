// Package envvars computes what a container's process gets from its pod
// spec, as Kubernetes defines it: the environment (literals, ConfigMap and
// Secret keys, envFrom with prefixes, the downward API's fieldRef and
// resourceFieldRef, $(VAR) references), the argv from command and args
// over the image's entrypoint and cmd, and the expansion of $(VAR) in
// commands and subPathExpr.
//
// It is pure apart from reading ConfigMaps and Secrets through the small
// Objects interface, so every rule is unit-tested without a hub. Errors
// that the user must fix (a missing ConfigMap or key) are *ConfigError,
// whose message is the one Kubernetes gives in a container's
// CreateContainerConfigError state.
package envvars
