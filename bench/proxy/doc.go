// Package proxybench measures the service proxy's rule writing for `make
// bench`: a full sync of N services with 3 endpoints each, one endpoint
// change at the largest N, and the same rules written one `iptables` call
// per rule (how rules were written before iptables-restore), with the ratio.
// Everything happens inside a network namespace the driver creates and
// deletes, so the host's tables are never touched. Needs root.
package proxybench
