package trust

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
)

// Cache remembers accepted verdicts, so that an image verified once starts
// again without its registry, until the keys or the policy change (the
// key includes the KeySetID). Refusals are never cached: a signature may
// be pushed later.
type Cache interface {
	// Lookup returns the name of the key that verified key's image.
	Lookup(key string) (keyName string, ok bool)
	// Remember records an accepted verdict.
	Remember(key, keyName string) error
}

// CacheKey is the cache key of a verdict: KeySetID, repository and digest.
func CacheKey(keySetID, repo string, d digest.Digest) string {
	return keySetID + " " + repo + "@" + d.String()
}

// MemoryCache is a Cache for one process.
type MemoryCache struct {
	mu sync.Mutex
	m  map[string]string
}

// NewMemoryCache returns an empty MemoryCache.
func NewMemoryCache() *MemoryCache { return &MemoryCache{m: map[string]string{}} }

// Lookup implements Cache.
func (c *MemoryCache) Lookup(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.m[key]
	return k, ok
}

// Remember implements Cache.
func (c *MemoryCache) Remember(key, keyName string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = keyName
	return nil
}

// MaxFileCacheEntries bounds a FileCache; the oldest verdicts go first.
const MaxFileCacheEntries = 4096

// FileCache is a Cache kept in a JSON file (in the agent's state
// directory), written whole and atomically on each Remember: verdicts are
// few and change only when new images arrive.
type FileCache struct {
	path string
	mu   sync.Mutex
	m    map[string]fileEntry
}

type fileEntry struct {
	Key string    `json:"key"`
	At  time.Time `json:"at"`
}

type cacheFile struct {
	Version  int                  `json:"version"`
	Verdicts map[string]fileEntry `json:"verdicts"`
}

// NewFileCache opens the cache at path. A missing file is an empty cache;
// an unreadable one too (its verdicts are then re-checked), so a corrupt
// file never stops the agent.
func NewFileCache(path string) (*FileCache, error) {
	c := &FileCache{path: path, m: map[string]fileEntry{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read verdict cache: %w", err)
	}
	var f cacheFile
	if json.Unmarshal(b, &f) == nil && f.Version == 1 && f.Verdicts != nil {
		c.m = f.Verdicts
	}
	return c, nil
}

// Lookup implements Cache.
func (c *FileCache) Lookup(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	return e.Key, ok
}

// Remember implements Cache.
func (c *FileCache) Remember(key, keyName string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok && e.Key == keyName {
		return nil
	}
	c.m[key] = fileEntry{Key: keyName, At: time.Now().UTC()}
	if len(c.m) > MaxFileCacheEntries {
		keys := make([]string, 0, len(c.m))
		for k := range c.m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return c.m[keys[i]].At.Before(c.m[keys[j]].At) })
		for _, k := range keys[:len(keys)-MaxFileCacheEntries] {
			delete(c.m, k)
		}
	}
	return c.save()
}

func (c *FileCache) save() error {
	b, err := json.Marshal(cacheFile{Version: 1, Verdicts: c.m})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return fmt.Errorf("write verdict cache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".verdicts-*")
	if err != nil {
		return fmt.Errorf("write verdict cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write verdict cache: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write verdict cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write verdict cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return fmt.Errorf("write verdict cache: %w", err)
	}
	return nil
}
