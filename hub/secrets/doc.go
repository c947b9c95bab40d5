// Package secrets owns the encryption at rest of Secret objects: a
// store.Store wrapper that seals every value under the Secrets prefix with
// AES-256-GCM before it reaches state.db and opens it on the way out, and
// the key it uses (DATA_DIR/pki/secrets.key, created on first start, mode
// 0600).
//
// Each sealed value is "flotilla:aesgcm:v1:" + a 4-byte key id + a 12-byte
// random nonce + the ciphertext. The store key is the additional data, so a
// sealed value copied under another key (one Secret's data moved to
// another) does not open. Values without the prefix are plaintext written
// before encryption was on; they are read as they are and EncryptExisting
// rewrites them sealed.
package secrets
