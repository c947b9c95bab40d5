// Package controller runs the hub's GitOps loop: for every GitSource it
// asks the remote which commit the ref names (every interval with jitter,
// or at once when a webhook arrives), fetches and loads that commit only
// when it is new, applies it as a whole, corrects drift, and reports in
// the GitSource's status which commit is applied and why the latest is
// not. It also serves the webhook receiver, POST /hooks/git/<ns>/<name>.
package controller
