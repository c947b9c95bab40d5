// Package ctl owns the flotctl command line: its commands (get, describe,
// fleet status, rollout, logs, apply, delete, version, completion), how it
// finds the hub (--kubeconfig, $FLOTILLA_KUBECONFIG, $KUBECONFIG,
// ~/.flotilla/config) and how it reports errors (as kubectl does, on stderr,
// exit code 1, never a stack trace).
//
// The commands fetch; the subpackages decide and write: output (table,
// YAML, JSON, name, JSONPath), describe, diagnose (who owns the stage where
// something is stuck), fleet (the one-screen view) and rollout.
package ctl
