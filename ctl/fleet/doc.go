// Package fleet owns `flotctl fleet status`: one screen for the whole
// fleet, computed from a snapshot of the hub's objects. Summarize is pure
// and Render only writes, so both are tested without a hub.
package fleet
