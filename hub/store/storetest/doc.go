// Package storetest owns the contract every store.Store implementation must
// meet: Run exercises CRUD with preconditions, listing at the latest and at
// past revisions, the shared revision counter, watches (replay then live,
// prefix filtering, compaction, slow consumers, cancellation), concurrent
// writers and, given a reopen hook, durability across a restart.
//
// RandomOpsMatchModel checks random operations against a map; its seed
// is random and logged, FLOTILLA_STORETEST_SEED=<seed> replays a failure
// and FLOTILLA_STORETEST_OPS=<n> makes a longer run.
package storetest
