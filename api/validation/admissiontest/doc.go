// Package admissiontest checks defaulting and validation end to end: a real
// hub (hub/hubtest) on loopback, driven with client-go, must default and
// refuse objects exactly as api/defaults and api/validation say. It holds
// only tests; it lives apart from api/validation so that those unit tests
// build without the whole hub.
package admissiontest
