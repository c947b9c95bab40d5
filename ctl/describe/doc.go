// Package describe owns `flotctl describe`: an object, its conditions and
// its events in kubectl's layout, ending with the Diagnosis of
// ctl/diagnose. It is pure: the command fetches, this package writes.
package describe
