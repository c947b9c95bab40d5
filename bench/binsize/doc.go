// Package binsize breaks a Go binary into the packages its code and
// read-only data come from, and attributes to one package what only it
// brings in: the bytes a binary would lose without it. `make bench` uses
// it to report the agent binary's largest packages and what image
// verification costs, so that the next regression shows where it is, and
// to find the call that turns off the linker's dead method elimination
// when one does (ReflectMethodPath).
package binsize
