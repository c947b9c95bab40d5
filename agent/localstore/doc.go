// Package localstore owns the device's last known desired state:
// DATA_DIR/state.db, a bbolt file, so that an agent that restarts (or a
// device that reboots) while the hub is unreachable keeps running what it
// ran.
//
// # What it holds
//
//   - The hub objects the agent acts on (Pods, ConfigMaps, Secrets,
//     Services, EndpointSlices, Nodes), one bucket per Kind, keyed
//     namespace/name (name alone for Nodes), each value the object's JSON
//     with the resourceVersion it came with in its metadata.
//   - Per kind, the resourceVersion of the last list or watch event, so a
//     restarted agent can tell how old its copy is.
//   - Facts under string keys (the image signature verdicts).
//
// # Why it is written first
//
// The agent writes an object here before it acts on it. If the device
// loses power between the two, the restarted agent finds the object and
// finishes the job; the other order could leave a container running that
// no record explains. When the hub source has not synced after a start,
// the kubelet's cache source serves pods from this store instead.
//
// # Secrets
//
// A Secret's whole JSON is sealed with AES-256-GCM (random nonce, the key
// as additional data so a value cannot be moved to another name) under a
// 32-byte device-local key kept beside the database (localstore.key, mode
// 0600, created on first open). The key never leaves the device: a copy of
// state.db alone, in a support bundle or off a pulled SD card, does not
// reveal them.
//
// # Failure modes
//
// The file is locked: a second agent on the same data directory gets
// ErrLocked. Open reads every page through a read-only handle before it
// opens the file for writing, because bbolt would otherwise panic on a
// damaged page (an SD card after a power cut) where no recover reaches
// and the agent would crash-loop. A file that fails gets ErrCorrupt and is
// never deleted or rewritten here; moving it away is safe because the
// agent rebuilds it from the hub. A key that does not fit the stored
// Secrets gets ErrKey, and a missing key is not replaced while Secrets
// sealed with it remain.
//
// # Writes
//
// Callers write on every watch event, so a write is one bbolt transaction,
// and a write that would store what is already there commits nothing: an
// idle fleet does not wear out its flash.
package localstore
