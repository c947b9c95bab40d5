// Package audit owns the hub's audit log: DATA_DIR/audit.log, one JSON
// object per line for every mutating request and every refusal (who, what
// verb on which object, the answer's code and the reason), rotated by size
// into audit.log.1 … audit.log.N so that it never fills the disk.
package audit
