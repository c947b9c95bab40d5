// Package audit owns the hub's audit log: DATA_DIR/audit.log, one JSON
// object per line for every mutating request and every refusal (who, what
// verb on which object, the answer's code and the reason), rotated by size
// into audit.log.1 … audit.log.N so that it never fills the disk.
//
// The log is written by the hub for anyone who reaches its port, so what a
// stranger sends must not be able to erase it:
//
//   - Every field is cut to a cap (the User-Agent to 256 bytes, the path
//     and the reason to 1 KiB, names to 256) and every line to
//     MaxLineBytes (4 KiB); a cut field ends with "…[N bytes]" giving its
//     original length, and the entry carries "truncated": true. Entries
//     within the caps are written exactly as before.
//   - Refusals (401, 403, 429) are written within a budget: 10 a second
//     after a burst of 100, for all unauthenticated clients together and
//     for each authenticated user. The rest are counted; an entry with
//     verb "dropped" gives the count, since when, and the last source
//     address, as soon as the budget allows again (and at Close). So
//     strangers write at most 36,100 lines an hour, each under 2 KiB even
//     with every field they choose at its cap: less than 70 MB, under one
//     file's 100 MB.
//   - A refusal never makes the log rotate away a file holding entries
//     younger than MinHistory (an hour): it is counted as dropped instead,
//     however many clients or users refuse at once. Only the hub's own
//     record of changes rotates old history away.
//   - Entries reach the file within 200 ms and are fsynced within a
//     second; a rotation fsyncs the full file and the directory first.
package audit
