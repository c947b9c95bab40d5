// Package docs is Flotilla's own documentation, in Markdown beside this
// file; its test keeps the links of the README and of these pages inside
// the repository and pointing at files and headings that exist.
package docs
