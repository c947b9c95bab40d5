package trust

import (
	"context"
	"testing"
)

// BenchmarkCheckInMemory is the verifier's own cost, without a network:
// fetching from an in-memory registry, parsing and checking one signature.
func BenchmarkCheckInMemory(b *testing.B) {
	for _, alg := range []string{"p256", "ed25519", "rsa"} {
		for _, layout := range []string{"sigtag", "bundle"} {
			b.Run(alg+"/"+layout, func(b *testing.B) {
				k := newKey(b, "k.pub", alg)
				v := mustVerifier(b, Config{Dir: trustDir(b, k)}, nil)
				m := newMemRegistry()
				m.referrersAPI = true
				ref, desc := m.pushImage(repo, alg+layout)
				if layout == "sigtag" {
					m.signLegacy(b, k, ref, desc.Digest, simplePayload(repo, desc.Digest))
				} else {
					m.signBundle(b, k, ref, desc, statement(desc.Digest, PredicateTypeSign), bundleOpts{})
				}
				ctx := context.Background()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := v.Verify(ctx, ref, desc, m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
