package main

// The time zone database is in the binary: a CronJob's spec.timeZone must
// resolve (in validation and in the CronJob loop) on a minimal host or a
// distroless image without /usr/share/zoneinfo. Go prefers the host's
// database when there is one. It costs 400 KB of the stripped binary
// (docs/operating.md).
import _ "time/tzdata"
