package secrets

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeyFile is the key's file name inside the hub's pki directory.
const KeyFile = "secrets.key"

// keySize is AES-256's.
const keySize = 32

// LoadOrCreateKey reads the key at path, or creates it (32 random bytes,
// base64, mode 0600) when the file does not exist. A file that exists but
// does not hold a key is an error: a new key would make every stored
// Secret unreadable.
func LoadOrCreateKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
		if err != nil || len(key) != keySize {
			return nil, fmt.Errorf("secrets: %s does not hold a base64 %d-byte key; restore it from a backup (a new key cannot read the Secrets already stored)", path, keySize)
		}
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(path, 0o600); err != nil {
				return nil, fmt.Errorf("secrets: tighten the mode of %s: %w", path, err)
			}
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("secrets: read %s: %w", path, err)
	}
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("secrets: generate a key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	// O_EXCL: two hubs racing on one data dir must not each write a key.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("secrets: create %s: %w", path, err)
	}
	_, werr := f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	if err := f.Sync(); werr == nil {
		werr = err
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("secrets: write %s: %w", path, werr)
	}
	return key, nil
}

// keyID names a key without revealing it, so a value sealed with another
// key is reported as such rather than as corrupt.
func keyID(key []byte) [4]byte {
	sum := sha256.Sum256(append([]byte("flotilla secrets key id\x00"), key...))
	return [4]byte(sum[:4])
}
