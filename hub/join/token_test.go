package join

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTokenShape(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		tok, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseToken(tok.String()); err != nil {
			t.Fatalf("NewToken made %q, which ParseToken refuses: %v", tok, err)
		}
		if seen[tok.String()] {
			t.Fatalf("token %q drawn twice", tok)
		}
		seen[tok.String()] = true
	}
	for _, bad := range []string{"", "abcdef", "abcdef.0123456789abcde", "ABCDEF.0123456789abcdef", "abcdef:0123456789abcdef", "abcdef.0123456789abcdef.x"} {
		if _, err := ParseToken(bad); !errors.Is(err, ErrBadToken) {
			t.Errorf("ParseToken(%q) = %v, want ErrBadToken", bad, err)
		}
	}
}

func TestTokenSecretRoundTrip(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	s, err := NewTokenSecret(tok, TokenOptions{TTL: time.Hour, Uses: 2, Labels: map[string]string{"site": "a"}, Description: "d"}, now)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range s.Data {
		if strings.Contains(string(v), tok.Secret) {
			t.Errorf("the secret is stored in %s", k)
		}
	}
	ti, err := parseTokenSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	if ti.ID != "abcdef" || ti.UsesLimit != 2 || ti.UsesLeft != 2 || ti.Labels["site"] != "a" || !ti.Expires.Equal(now.Add(time.Hour)) {
		t.Errorf("parsed %+v", ti)
	}
	if !ti.matches(tok.Secret) || ti.matches("0123456789abcdee") {
		t.Error("secret matching is wrong")
	}
	h := &Handler{Now: func() time.Time { return now }}
	if err := h.usable(ti); err != nil {
		t.Errorf("fresh token unusable: %v", err)
	}
	h.Now = func() time.Time { return now.Add(time.Hour) }
	if err := h.usable(ti); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired token: %v", err)
	}
	h.Now = func() time.Time { return now }
	ti.UsesLeft = 0
	if err := h.usable(ti); err == nil || !strings.Contains(err.Error(), "all the 2 joins") {
		t.Errorf("exhausted token: %v", err)
	}
	// No TTL and no use limit: forever, any number.
	s, _ = NewTokenSecret(tok, TokenOptions{}, now)
	ti, err = parseTokenSecret(s)
	if err != nil || ti.Expires != nil || ti.UsesLimit != 0 {
		t.Errorf("unlimited token parsed as %+v (%v)", ti, err)
	}
	if _, err := NewTokenSecret(tok, TokenOptions{Labels: map[string]string{"bad key!": "x"}}, now); err == nil {
		t.Error("an invalid label was accepted")
	}
}

func TestParseLabels(t *testing.T) {
	l, err := ParseLabels("a=1, node.flotilla.dev/b=two,,")
	if err != nil || len(l) != 2 || l["node.flotilla.dev/b"] != "two" {
		t.Errorf("ParseLabels = %v, %v", l, err)
	}
	for _, bad := range []string{"novalue", "a=has space", "-a=1"} {
		if _, err := ParseLabels(bad); err == nil {
			t.Errorf("ParseLabels(%q) accepted", bad)
		}
	}
}
