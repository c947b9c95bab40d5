package trust

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

// A payload as cosign v2.6.5 wrote it for a test image.
const cosignPayload = `{"critical":{"identity":{"docker-reference":"127.0.0.1:5599/demo/app"},"image":{"docker-manifest-digest":"sha256:651e312b2be06d2d76a388f953d8e85d8f5bb0eef9a3687c3fc8a7034a5355fc"},"type":"cosign container image signature"},"optional":null}`

// A bundle as cosign v2.6.5 sign --new-bundle-format wrote it (key-based,
// no transparency log) for the same image.
const cosignBundle = `{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{"publicKey":{"hint":"dzhDUL9rSib8YIaePU6jhLKjZXcN6ZKYUHQiht0aPpM="}},"dsseEnvelope":{"payload":"eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCAic3ViamVjdCI6W3siZGlnZXN0Ijp7InNoYTI1NiI6IjY1MWUzMTJiMmJlMDZkMmQ3NmEzODhmOTUzZDhlODVkOGY1YmIwZWVmOWEzNjg3YzNmYzhhNzAzNGE1MzU1ZmMifX1dLCAicHJlZGljYXRlVHlwZSI6Imh0dHBzOi8vc2lnc3RvcmUuZGV2L2Nvc2lnbi9zaWduL3YxIn0=","payloadType":"application/vnd.in-toto+json","signatures":[{"sig":"MEYCIQDqj4UaeeLHMCHvjA8LtiAQGSDk01Dp6qvddV6cubNDkQIhAMUX8SRtpbaHaAESGwd92YMur1Hg8MWB8wS0Bb17XsF4"}]}}`

// The public key that signed both, as cosign generate-key-pair wrote it.
const cosignPub = `-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqTP9P831sATcYj//PAo9Ya3emSUA
ZTRy46xJRYsezIxGUrahWJbSTIGFZ+oxrU1wUkz++Xz+xKn8WykNwom6iA==
-----END PUBLIC KEY-----
`

const cosignDigest = digest.Digest("sha256:651e312b2be06d2d76a388f953d8e85d8f5bb0eef9a3687c3fc8a7034a5355fc")

func TestParsePayload(t *testing.T) {
	p, err := ParsePayload([]byte(cosignPayload))
	if err != nil || p.Digest != cosignDigest || p.DockerReference != "127.0.0.1:5599/demo/app" {
		t.Fatalf("%+v %v", p, err)
	}
	for name, bad := range map[string]string{
		"not JSON":     `{`,
		"array":        `[]`,
		"wrong type":   strings.Replace(cosignPayload, "cosign container image signature", "atomic container signature", 1),
		"no type":      `{"critical":{"image":{"docker-manifest-digest":"` + cosignDigest.String() + `"}}}`,
		"bad digest":   strings.Replace(cosignPayload, "sha256:651e", "sha256:XYZ1", 1),
		"short digest": `{"critical":{"image":{"docker-manifest-digest":"sha256:abc"},"type":"cosign container image signature"}}`,
		"no digest":    `{"critical":{"type":"cosign container image signature"}}`,
		"huge":         `{"x":"` + strings.Repeat("a", maxPayload) + `"}`,
	} {
		if _, err := ParsePayload([]byte(bad)); !errors.Is(err, ErrInvalidPayload) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// TestCosignWrittenSignatures checks signatures the real CLI wrote: they
// verify with its key, and not with another.
func TestCosignWrittenSignatures(t *testing.T) {
	k, err := ParseKey("cosign.pub", []byte(cosignPub))
	if err != nil {
		t.Fatal(err)
	}
	if k.hint != "dzhDUL9rSib8YIaePU6jhLKjZXcN6ZKYUHQiht0aPpM=" || k.Algorithm != "ecdsa-p256" {
		t.Fatalf("key %+v", k)
	}
	env, err := ParseBundle([]byte(cosignBundle))
	if err != nil || env.Keyless || env.Hint != k.hint || len(env.Signatures) != 1 {
		t.Fatalf("%+v %v", env, err)
	}
	if !verifyWith(k.dsse, env.Signatures[0], PAE(env.PayloadType, env.Payload)) {
		t.Fatal("cosign's bundle does not verify")
	}
	st, err := ParseStatement(env.Payload)
	if err != nil || st.PredicateType != PredicateTypeSign || len(st.Subjects) != 1 || st.Subjects[0] != cosignDigest {
		t.Fatalf("%+v %v", st, err)
	}
	j := judge([]*Key{k}, cosignDigest, []candidate{{layout: LayoutBundle, env: &env}})
	if j.key != k {
		t.Fatalf("judged %+v", j)
	}
	other, _ := ParseKey("other.pub", newKey(t, "other.pub", "p256").pubPEM)
	if j := judge([]*Key{other}, cosignDigest, []candidate{{layout: LayoutBundle, env: &env}}); j.key != nil || j.untrusted != 1 {
		t.Fatalf("judged with another key: %+v", j)
	}
	if j := judge([]*Key{k}, digest.FromString("other"), []candidate{{layout: LayoutBundle, env: &env}}); j.key != nil || len(j.otherDigests) != 1 {
		t.Fatalf("judged for another digest: %+v", j)
	}
}

func TestParseBundle(t *testing.T) {
	mutate := func(f func(map[string]any)) string {
		var c map[string]any
		json.Unmarshal([]byte(cosignBundle), &c)
		f(c)
		out, _ := json.Marshal(c)
		return string(out)
	}
	cases := map[string]string{
		"not a bundle":      mutate(func(c map[string]any) { c["mediaType"] = "application/json" }),
		"no envelope":       mutate(func(c map[string]any) { delete(c, "dsseEnvelope") }),
		"message signature": mutate(func(c map[string]any) { delete(c, "dsseEnvelope"); c["messageSignature"] = map[string]any{} }),
		"no signatures": mutate(func(c map[string]any) {
			c["dsseEnvelope"].(map[string]any)["signatures"] = []any{}
		}),
		"payload not base64": mutate(func(c map[string]any) { c["dsseEnvelope"].(map[string]any)["payload"] = "!!" }),
		"not JSON":           `{"mediaType":`,
	}
	for name, in := range cases {
		if _, err := ParseBundle([]byte(in)); !errors.Is(err, ErrInvalidPayload) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	keyless := mutate(func(c map[string]any) {
		c["verificationMaterial"] = map[string]any{"x509CertificateChain": map[string]any{"certificates": []any{}}}
	})
	if env, err := ParseBundle([]byte(keyless)); err != nil || !env.Keyless {
		t.Fatalf("keyless: %+v %v", env, err)
	}
	// protobuf JSON may leave base64 unpadded or URL-safe.
	raw := strings.Replace(cosignBundle, "=\",\"payloadType", "\",\"payloadType", 1)
	if raw == cosignBundle {
		t.Fatal("the test bundle's payload has no padding to drop")
	}
	if _, err := ParseBundle([]byte(raw)); err != nil {
		t.Fatalf("unpadded payload: %v", err)
	}
}

func TestParseStatement(t *testing.T) {
	d := digest.FromString("img")
	st, err := ParseStatement([]byte(`{"_type":"https://in-toto.io/Statement/v0.1","predicateType":"p","subject":[{"digest":{"sha256":"` + d.Encoded() + `","md5":"00"}},{"digest":{"sha512":"zz"}}]}`))
	if err != nil || st.PredicateType != "p" || len(st.Subjects) != 1 || st.Subjects[0] != d {
		t.Fatalf("%+v %v", st, err)
	}
	for _, bad := range []string{`{}`, `{"_type":"x"}`, `[`, `{"_type":"https://in-toto.io/Statement/v1","subject":"no"}`} {
		if _, err := ParseStatement([]byte(bad)); !errors.Is(err, ErrInvalidPayload) {
			t.Errorf("%s: err = %v", bad, err)
		}
	}
}

func TestPAE(t *testing.T) {
	// The DSSE specification's worked example.
	if got := string(PAE("http://example.com/HelloWorld", []byte("hello world"))); got != "DSSEv1 29 http://example.com/HelloWorld 11 hello world" {
		t.Fatalf("PAE = %q", got)
	}
}

func TestParseKey(t *testing.T) {
	for _, alg := range []string{"p256", "p384", "ed25519", "rsa"} {
		tk := newKey(t, alg+".pub", alg)
		k, err := ParseKey(tk.name, tk.pubPEM)
		if err != nil || k.ID == "" || k.hint != tk.hint(t) {
			t.Fatalf("%s: %+v %v", alg, k, err)
		}
	}
	for name, bad := range map[string]string{
		"empty":       "",
		"private key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
		"garbage":     "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
	} {
		if _, err := ParseKey(name, []byte(bad)); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// FuzzPayload: the signature-payload parsers (simple signing, bundle,
// in-toto statement) never panic on what a registry serves, and whatever
// they accept is well-formed: valid digests, a payload type, signatures.
func FuzzPayload(f *testing.F) {
	f.Add([]byte(cosignPayload))
	f.Add([]byte(cosignBundle))
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"sha256":"` + cosignDigest.Encoded() + `"}}],"predicateType":"https://sigstore.dev/cosign/sign/v1"}`))
	f.Add([]byte(`{"critical":{"image":{"docker-manifest-digest":"sha512:00"},"type":"cosign container image signature"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := ParsePayload(b); err == nil {
			if p.Digest.Validate() != nil {
				t.Fatalf("accepted payload with digest %q", p.Digest)
			}
		} else if !errors.Is(err, ErrInvalidPayload) {
			t.Fatalf("ParsePayload error %v does not wrap ErrInvalidPayload", err)
		}
		if env, err := ParseBundle(b); err == nil {
			if len(env.Signatures) == 0 {
				t.Fatal("accepted bundle without signatures")
			}
			_ = PAE(env.PayloadType, env.Payload)
		} else if !errors.Is(err, ErrInvalidPayload) {
			t.Fatalf("ParseBundle error %v does not wrap ErrInvalidPayload", err)
		}
		if st, err := ParseStatement(b); err == nil {
			for _, d := range st.Subjects {
				if d.Validate() != nil {
					t.Fatalf("accepted statement with subject %q", d)
				}
			}
		}
	})
}
