// Package gittest drives the git CLI to make real repositories for tests
// and benchmarks: a bare repository served by file:// URL and a work tree
// that commits and pushes to it.
package gittest
