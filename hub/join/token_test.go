package join

import (
	"errors"
	"maps"
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

// A token's labels are kept in its Secret as agentapi.ParseLabels reads
// them.
func TestTokenLabels(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "1", "node.flotilla.dev/b": "two", "empty": ""}
	s, err := NewTokenSecret(tok, TokenOptions{Labels: want}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ti, err := parseTokenSecret(s)
	if err != nil || !maps.Equal(ti.Labels, want) {
		t.Errorf("labels %v (%v), want %v", ti.Labels, err, want)
	}
}
