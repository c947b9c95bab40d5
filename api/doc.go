// Package api holds what every Flotilla component agrees on about objects:
// the scheme of served kinds, the table of served resources, well-known
// labels and annotations, and (in subpackages) Flotilla's own kinds,
// defaulting and validation.
package api
