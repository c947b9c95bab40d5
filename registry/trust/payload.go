package trust

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// Media types and constants of the two layouts.
const (
	// MediaTypeSimpleSigning is a cosign v2 signature layer.
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	// AnnotationSignature holds a simple-signing layer's base64 signature.
	AnnotationSignature = "dev.cosignproject.cosign/signature"
	// MediaTypeBundle is the sigstore bundle cosign v3 attaches as a
	// referrer.
	MediaTypeBundle = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// PredicateTypeSign is the in-toto predicate type of `cosign sign` in
	// a bundle; anything else (SLSA provenance, SBOMs) is an attestation.
	PredicateTypeSign = "https://sigstore.dev/cosign/sign/v1"
	// PayloadTypeInToto is the DSSE payload type of an in-toto statement.
	PayloadTypeInToto = "application/vnd.in-toto+json"
)

// ErrInvalidPayload is wrapped by the parsers' errors.
var ErrInvalidPayload = errors.New("invalid signature payload")

// maxPayload bounds a payload or bundle: cosign's are well under 16 KiB,
// with certificates and log entries.
const maxPayload = 1 << 20

// Payload is what a cosign v2 simple-signing payload says.
type Payload struct {
	// Digest is critical.image.docker-manifest-digest.
	Digest digest.Digest
	// DockerReference is critical.identity.docker-reference: the
	// repository it was signed in, informational only.
	DockerReference string
}

// ParsePayload reads a simple-signing payload. It must be a JSON object
// whose critical.type is "cosign container image signature" and whose
// critical.image.docker-manifest-digest is a valid digest.
func ParsePayload(b []byte) (Payload, error) {
	if len(b) > maxPayload {
		return Payload{}, fmt.Errorf("%w: larger than %d bytes", ErrInvalidPayload, maxPayload)
	}
	var p payload.SimpleContainerImage
	if err := json.Unmarshal(b, &p); err != nil {
		return Payload{}, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
	}
	if p.Critical.Type != payload.CosignSignatureType {
		return Payload{}, fmt.Errorf("%w: critical.type is %q, not %q", ErrInvalidPayload, p.Critical.Type, payload.CosignSignatureType)
	}
	d, err := digest.Parse(p.Critical.Image.DockerManifestDigest)
	if err != nil {
		return Payload{}, fmt.Errorf("%w: critical.image.docker-manifest-digest %q: %v", ErrInvalidPayload, p.Critical.Image.DockerManifestDigest, err)
	}
	return Payload{Digest: d, DockerReference: p.Critical.Identity.DockerReference}, nil
}

// bundle is the part of a sigstore bundle (protobuf JSON, camelCase
// field names) that key-based verification reads.
type bundle struct {
	MediaType            string `json:"mediaType"`
	VerificationMaterial struct {
		PublicKey *struct {
			Hint string `json:"hint"`
		} `json:"publicKey"`
		// Certificates mean a keyless (Fulcio) signature, which needs a
		// transparency log and is never trusted here.
		Certificate          json.RawMessage `json:"certificate"`
		X509CertificateChain json.RawMessage `json:"x509CertificateChain"`
	} `json:"verificationMaterial"`
	DSSEEnvelope *struct {
		Payload     string `json:"payload"`
		PayloadType string `json:"payloadType"`
		Signatures  []struct {
			Sig   string `json:"sig"`
			KeyID string `json:"keyid"`
		} `json:"signatures"`
	} `json:"dsseEnvelope"`
	MessageSignature json.RawMessage `json:"messageSignature"`
}

// Envelope is a bundle's DSSE envelope, decoded.
type Envelope struct {
	// Hint is the bundle's publicKey.hint (base64 SHA-256 of the key's
	// DER), empty for a keyless bundle; it only orders the keys tried.
	Hint string
	// Keyless is set when the bundle carries a certificate, not a key.
	Keyless     bool
	PayloadType string
	Payload     []byte
	Signatures  [][]byte
}

// ParseBundle reads a sigstore bundle that holds a DSSE envelope, as
// cosign sign writes with the new bundle format.
func ParseBundle(b []byte) (Envelope, error) {
	if len(b) > maxPayload {
		return Envelope{}, fmt.Errorf("%w: bundle larger than %d bytes", ErrInvalidPayload, maxPayload)
	}
	var bd bundle
	if err := json.Unmarshal(b, &bd); err != nil {
		return Envelope{}, fmt.Errorf("%w: bundle: %v", ErrInvalidPayload, err)
	}
	if !strings.HasPrefix(bd.MediaType, "application/vnd.dev.sigstore.bundle") {
		return Envelope{}, fmt.Errorf("%w: bundle mediaType %q is not a sigstore bundle", ErrInvalidPayload, bd.MediaType)
	}
	if bd.DSSEEnvelope == nil {
		if len(bd.MessageSignature) > 0 {
			return Envelope{}, fmt.Errorf("%w: bundle holds a message signature (cosign sign-blob), not a DSSE image signature", ErrInvalidPayload)
		}
		return Envelope{}, fmt.Errorf("%w: bundle has no dsseEnvelope", ErrInvalidPayload)
	}
	env := Envelope{PayloadType: bd.DSSEEnvelope.PayloadType}
	if pk := bd.VerificationMaterial.PublicKey; pk != nil {
		env.Hint = pk.Hint
	}
	env.Keyless = isSet(bd.VerificationMaterial.Certificate) || isSet(bd.VerificationMaterial.X509CertificateChain)
	var err error
	if env.Payload, err = decodeBase64(bd.DSSEEnvelope.Payload); err != nil {
		return Envelope{}, fmt.Errorf("%w: dsseEnvelope.payload: %v", ErrInvalidPayload, err)
	}
	for i, s := range bd.DSSEEnvelope.Signatures {
		sig, err := decodeBase64(s.Sig)
		if err != nil {
			return Envelope{}, fmt.Errorf("%w: dsseEnvelope.signatures[%d].sig: %v", ErrInvalidPayload, i, err)
		}
		env.Signatures = append(env.Signatures, sig)
	}
	if len(env.Signatures) == 0 {
		return Envelope{}, fmt.Errorf("%w: dsseEnvelope has no signature", ErrInvalidPayload)
	}
	return env, nil
}

func isSet(m json.RawMessage) bool { return len(m) > 0 && string(m) != "null" }

// PAE is DSSE's pre-authentication encoding, what the envelope's
// signatures sign: the payload type and payload, length-prefixed, so no
// payload can pass for another type.
func PAE(payloadType string, payload []byte) []byte {
	var b strings.Builder
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteByte(' ')
	b.WriteString(payloadType)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteByte(' ')
	b.Write(payload)
	return []byte(b.String())
}

// Statement is what an in-toto statement in a bundle says.
type Statement struct {
	PredicateType string
	// Subjects are the digests the statement is about.
	Subjects []digest.Digest
}

// ParseStatement reads an in-toto statement (v0.1 or v1). Subject digests
// of algorithms other than sha256, sha384 and sha512 are skipped.
func ParseStatement(b []byte) (Statement, error) {
	var st struct {
		Type          string `json:"_type"`
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return Statement{}, fmt.Errorf("%w: in-toto statement: %v", ErrInvalidPayload, err)
	}
	if st.Type != "https://in-toto.io/Statement/v1" && st.Type != "https://in-toto.io/Statement/v0.1" {
		return Statement{}, fmt.Errorf("%w: _type %q is not an in-toto statement", ErrInvalidPayload, st.Type)
	}
	out := Statement{PredicateType: st.PredicateType}
	for _, s := range st.Subject {
		for alg, enc := range s.Digest {
			if d, err := digest.Parse(alg + ":" + enc); err == nil {
				out.Subjects = append(out.Subjects, d)
			}
		}
	}
	return out, nil
}

// decodeBase64 accepts what protobuf JSON accepts for bytes: standard or
// URL-safe alphabet, padded or not.
func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}
