// Command client is the e2e tests' in-cluster client: it sends requests to
// URLs for a while and prints, as its last line, a JSON summary of which
// backends answered and how many requests failed.
package main
