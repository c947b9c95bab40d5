package trust

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/options"
)

// ErrInvalidKey is wrapped by errors for a key file that cannot be used.
var ErrInvalidKey = errors.New("invalid trusted key")

// KeyExt is the extension of key files in the trust directory.
const KeyExt = ".pub"

// maxKeyFile bounds a key file: a PEM RSA-4096 key is under 1 KiB.
const maxKeyFile = 64 << 10

// Key is one trusted public key.
type Key struct {
	// Name is the file name in the trust directory ("release.pub").
	Name string
	// ID is the hex SHA-256 of the key's PKIX DER encoding.
	ID string
	// Algorithm is "ecdsa-p256", "ed25519", "rsa-2048", ...
	Algorithm string

	// hint is what cosign writes as a bundle's publicKey.hint: the
	// standard base64 of the same SHA-256.
	hint string
	// legacy verify cosign v2 simple-signing signatures; dsse verify
	// bundle envelopes. Each is tried in order, most likely first: cosign
	// has hashed with SHA-256 for the legacy layout whatever the curve,
	// sigstore's bundle signing picks the hash by curve, and Ed25519 may
	// be pure or Ed25519ph.
	legacy, dsse []signature.Verifier
}

// ParseKey reads a PEM public key as cosign writes it.
func ParseKey(name string, pemBytes []byte) (*Key, error) {
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("%w %s: not a PEM public key: %v", ErrInvalidKey, name, err)
	}
	if err := cryptoutils.ValidatePubKey(pub); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalidKey, name, err)
	}
	der, err := cryptoutils.MarshalPublicKeyToDER(pub)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalidKey, name, err)
	}
	sum := sha256.Sum256(der)
	k := &Key{Name: name, ID: hex.EncodeToString(sum[:]), hint: base64.StdEncoding.EncodeToString(sum[:])}
	load := func(opts ...signature.LoadOption) signature.Verifier {
		v, lerr := signature.LoadVerifierWithOpts(pub, opts...)
		if lerr != nil {
			err = lerr
		}
		return v
	}
	switch p := pub.(type) {
	case *ecdsa.PublicKey:
		k.Algorithm = "ecdsa-" + strings.ToLower(strings.ReplaceAll(p.Curve.Params().Name, "-", ""))
		v256 := load(options.WithHash(crypto.SHA256))
		k.legacy = []signature.Verifier{v256}
		k.dsse = []signature.Verifier{v256}
		if h := curveHash(p.Curve); h != crypto.SHA256 {
			vc := load(options.WithHash(h))
			k.legacy = append(k.legacy, vc)
			k.dsse = append([]signature.Verifier{vc}, k.dsse...)
		}
	case *rsa.PublicKey:
		k.Algorithm = fmt.Sprintf("rsa-%d", p.Size()*8)
		v := load(options.WithHash(crypto.SHA256))
		k.legacy, k.dsse = []signature.Verifier{v}, []signature.Verifier{v}
	case ed25519.PublicKey:
		k.Algorithm = "ed25519"
		pure, ph := load(), load(options.WithED25519ph())
		k.legacy = []signature.Verifier{pure, ph}
		k.dsse = []signature.Verifier{pure, ph}
	}
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalidKey, name, err)
	}
	return k, nil
}

func curveHash(c elliptic.Curve) crypto.Hash {
	switch c {
	case elliptic.P384():
		return crypto.SHA384
	case elliptic.P521():
		return crypto.SHA512
	}
	return crypto.SHA256
}

// verifyWith reports whether any of vs accepts sig over msg.
func verifyWith(vs []signature.Verifier, sig, msg []byte) bool {
	for _, v := range vs {
		if v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(msg)) == nil {
			return true
		}
	}
	return false
}

// KeySet is the trusted keys of a directory, by file name.
type KeySet struct {
	Dir  string
	Keys map[string]*Key
	// Errors are the files that could not be read as keys; they are left
	// out, so images signed only by them are refused.
	Errors []error
}

// LoadKeySet reads every *.pub regular file (or symlink to one, as a
// mounted Secret has) in dir. A missing directory is an empty set: no keys,
// verification off unless the policy names keys.
func LoadKeySet(dir string) (*KeySet, error) {
	ks := &KeySet{Dir: dir, Keys: map[string]*Key{}}
	if dir == "" {
		return ks, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return ks, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read trust dir %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, KeyExt) || strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if fi.Size() > maxKeyFile {
			ks.Errors = append(ks.Errors, fmt.Errorf("%w %s: larger than %d bytes", ErrInvalidKey, path, maxKeyFile))
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			ks.Errors = append(ks.Errors, fmt.Errorf("%w %s: %v", ErrInvalidKey, path, err))
			continue
		}
		k, err := ParseKey(name, b)
		if err != nil {
			ks.Errors = append(ks.Errors, err)
			continue
		}
		ks.Keys[name] = k
	}
	return ks, nil
}

// Names are the key file names, sorted.
func (ks *KeySet) Names() []string {
	names := make([]string, 0, len(ks.Keys))
	for n := range ks.Keys {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
