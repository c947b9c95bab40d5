package source

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"
)

// Verification errors.
var (
	// ErrUnsigned means the commit carries no signature.
	ErrUnsigned = errors.New("the commit is not signed")
	// ErrUntrusted means the signature is bad or by a key not trusted.
	ErrUntrusted = errors.New("the commit's signature is not by a trusted key")
	// ErrNoKeys means the verification Secret holds no usable key.
	ErrNoKeys = errors.New("no trusted keys")
)

// TrustedKeys are the keys of a verification Secret: armored GPG public
// keys and SSH authorized_keys lines, in any of its values.
type TrustedKeys struct {
	gpg []string
	ssh []ssh.PublicKey
}

// ParseTrustedKeys reads every value of a verification Secret.
func ParseTrustedKeys(data map[string][]byte) (*TrustedKeys, error) {
	k := &TrustedKeys{}
	names := make([]string, 0, len(data))
	for n := range data {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v := data[n]
		if bytes.Contains(v, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----")) {
			k.gpg = append(k.gpg, string(v))
			continue
		}
		rest := v
		for len(bytes.TrimSpace(rest)) > 0 {
			pub, _, _, r, err := ssh.ParseAuthorizedKey(rest)
			if err != nil {
				return nil, fmt.Errorf("key %q of the verification Secret is neither an armored GPG public key nor SSH authorized_keys lines: %w", n, err)
			}
			k.ssh = append(k.ssh, pub)
			rest = r
		}
	}
	if len(k.gpg) == 0 && len(k.ssh) == 0 {
		return nil, fmt.Errorf("%w: the verification Secret has no armored GPG public key or SSH public key", ErrNoKeys)
	}
	return k, nil
}

// Verify checks that c carries a good signature by one of the keys and
// says whose.
func (k *TrustedKeys) Verify(c *object.Commit) (string, error) {
	sig := strings.TrimSpace(c.PGPSignature)
	if sig == "" {
		return "", fmt.Errorf("%s: %w", c.Hash, ErrUnsigned)
	}
	if strings.HasPrefix(sig, "-----BEGIN SSH SIGNATURE-----") {
		return k.verifySSH(c, sig)
	}
	if len(k.gpg) == 0 {
		return "", fmt.Errorf("%s: %w: it has a GPG signature and no GPG key is trusted", c.Hash, ErrUntrusted)
	}
	e, err := c.Verify(strings.Join(k.gpg, "\n"))
	if err != nil {
		return "", fmt.Errorf("%s: %w: %v", c.Hash, ErrUntrusted, err)
	}
	for name := range e.Identities {
		return fmt.Sprintf("GPG key %X (%s)", e.PrimaryKey.KeyId, name), nil
	}
	return fmt.Sprintf("GPG key %X", e.PrimaryKey.KeyId), nil
}

// sshSig is the body of an SSH signature (PROTOCOL.sshsig) after its magic.
type sshSig struct {
	Version   uint32
	PublicKey []byte
	Namespace string
	Reserved  string
	HashAlg   string
	Signature []byte
}

const sshSigMagic = "SSHSIG"

func (k *TrustedKeys) verifySSH(c *object.Commit, armored string) (string, error) {
	fail := func(why string) (string, error) {
		return "", fmt.Errorf("%s: %w: %s", c.Hash, ErrUntrusted, why)
	}
	if len(k.ssh) == 0 {
		return fail("it has an SSH signature and no SSH key is trusted")
	}
	block, _ := pem.Decode([]byte(armored))
	if block == nil || block.Type != "SSH SIGNATURE" || !bytes.HasPrefix(block.Bytes, []byte(sshSigMagic)) {
		return fail("the SSH signature is malformed")
	}
	var s sshSig
	if err := ssh.Unmarshal(block.Bytes[len(sshSigMagic):], &s); err != nil {
		return fail("the SSH signature is malformed: " + err.Error())
	}
	if s.Version != 1 {
		return fail(fmt.Sprintf("SSH signature version %d is not supported", s.Version))
	}
	if s.Namespace != "git" {
		return fail(fmt.Sprintf("the SSH signature is for %q, not git", s.Namespace))
	}
	pub, err := ssh.ParsePublicKey(s.PublicKey)
	if err != nil {
		return fail("the SSH signature's key: " + err.Error())
	}
	trusted := false
	for _, t := range k.ssh {
		if bytes.Equal(t.Marshal(), pub.Marshal()) {
			trusted = true
			break
		}
	}
	if !trusted {
		return fail("signed by " + ssh.FingerprintSHA256(pub) + ", which is not a trusted key")
	}
	msg, err := unsignedCommit(c)
	if err != nil {
		return "", err
	}
	var digest []byte
	switch s.HashAlg {
	case "sha512":
		d := sha512.Sum512(msg)
		digest = d[:]
	case "sha256":
		d := sha256.Sum256(msg)
		digest = d[:]
	default:
		return fail("unsupported hash " + s.HashAlg)
	}
	signed := append([]byte(sshSigMagic), ssh.Marshal(struct {
		Namespace string
		Reserved  string
		HashAlg   string
		Hash      []byte
	}{s.Namespace, s.Reserved, s.HashAlg, digest})...)
	var sig ssh.Signature
	if err := ssh.Unmarshal(s.Signature, &sig); err != nil {
		return fail("the SSH signature blob: " + err.Error())
	}
	if err := pub.Verify(signed, &sig); err != nil {
		return fail("the SSH signature does not match the commit")
	}
	return "SSH key " + ssh.FingerprintSHA256(pub), nil
}

func unsignedCommit(c *object.Commit) ([]byte, error) {
	o := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(o); err != nil {
		return nil, fmt.Errorf("encoding commit %s: %w", c.Hash, err)
	}
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
