// Package source keeps a local copy of a GitSource's repository in the
// hub's data dir and answers two questions cheaply: which commit does the
// followed ref point at now (ls-remote, no fetch), and what are the files of
// that commit (a shallow, single-ref fetch, only when the commit is not
// already here). It also checks commit signatures against trusted GPG or
// SSH keys. Credentials are used for transport only and never logged.
package source
