package join

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
)

// Token secrets follow kubeadm's bootstrap tokens.
const (
	SecretType   corev1.SecretType = "bootstrap.kubernetes.io/token"
	SecretPrefix                   = "bootstrap-token-"
	Namespace                      = api.NamespaceSystem

	keyID         = "token-id"
	keySecretHash = "token-secret-sha256"
	keyExpiration = "expiration"
	keyUsesLimit  = "uses-limit"
	keyUsesLeft   = "uses-remaining"
	keyLabels     = "labels"
	keyDesc       = "description"
)

// DefaultTTL is a token's lifetime unless told otherwise.
const DefaultTTL = 24 * time.Hour

var tokenRE = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// ErrBadToken means a string is not shaped like a join token.
var ErrBadToken = errors.New("a join token looks like abcdef.0123456789abcdef (6 and 16 characters of a-z, 0-9)")

// Token is a join token: a public id and a secret.
type Token struct{ ID, Secret string }

func (t Token) String() string { return t.ID + "." + t.Secret }

// ParseToken checks the token's shape.
func ParseToken(s string) (Token, error) {
	m := tokenRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Token{}, ErrBadToken
	}
	return Token{ID: m[1], Secret: m[2]}, nil
}

// NewToken makes a random token.
func NewToken() (Token, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 22)
	// 36 does not divide 256: draw bytes below the largest multiple of 36
	// so every character is equally likely.
	for i := 0; i < len(b); {
		var x [32]byte
		if _, err := rand.Read(x[:]); err != nil {
			return Token{}, fmt.Errorf("generating a token: %w", err)
		}
		for _, c := range x {
			if c < 252 && i < len(b) {
				b[i] = alphabet[int(c)%36]
				i++
			}
		}
	}
	return Token{ID: string(b[:6]), Secret: string(b[6:])}, nil
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// SecretName is the name of the Secret that holds token id.
func SecretName(id string) string { return SecretPrefix + id }

// TokenOptions describe a new token.
type TokenOptions struct {
	// TTL is how long the token may be used; 0 means forever.
	TTL time.Duration
	// Uses is how many devices may join with it; 0 means any number.
	Uses int
	// Labels are put on the Node of every device that joins with it.
	Labels      map[string]string
	Description string
}

// TokenInfo is a stored token, without its secret.
type TokenInfo struct {
	ID          string            `json:"id"`
	Expires     *time.Time        `json:"expires,omitempty"`
	UsesLimit   int               `json:"usesLimit,omitempty"`
	UsesLeft    int               `json:"usesLeft,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Description string            `json:"description,omitempty"`

	hash string
	sec  *corev1.Secret
}

func formatLabels(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}

// NewTokenSecret is the Secret that stores tok: only a hash of its secret.
func NewTokenSecret(tok Token, o TokenOptions, now time.Time) (*corev1.Secret, error) {
	if o.TTL < 0 {
		return nil, fmt.Errorf("token TTL %s is negative", o.TTL)
	}
	if o.Uses < 0 {
		return nil, fmt.Errorf("token uses %d is negative", o.Uses)
	}
	if err := agentapi.ValidateLabels(o.Labels); err != nil {
		return nil, err
	}
	data := map[string][]byte{
		keyID:         []byte(tok.ID),
		keySecretHash: []byte(hashSecret(tok.Secret)),
	}
	if o.TTL > 0 {
		data[keyExpiration] = []byte(now.Add(o.TTL).UTC().Format(time.RFC3339))
	}
	if o.Uses > 0 {
		data[keyUsesLimit] = []byte(strconv.Itoa(o.Uses))
		data[keyUsesLeft] = []byte(strconv.Itoa(o.Uses))
	}
	if len(o.Labels) > 0 {
		data[keyLabels] = []byte(formatLabels(o.Labels))
	}
	if o.Description != "" {
		data[keyDesc] = []byte(o.Description)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(tok.ID), Namespace: Namespace},
		Type:       SecretType,
		Data:       data,
	}, nil
}

// parseTokenSecret reads a stored token.
func parseTokenSecret(s *corev1.Secret) (*TokenInfo, error) {
	if s.Type != SecretType {
		return nil, fmt.Errorf("secret %s/%s is of type %q, not a join token", s.Namespace, s.Name, s.Type)
	}
	ti := &TokenInfo{ID: string(s.Data[keyID]), hash: string(s.Data[keySecretHash]), Description: string(s.Data[keyDesc]), sec: s}
	if ti.ID == "" || ti.hash == "" || SecretName(ti.ID) != s.Name {
		return nil, fmt.Errorf("secret %s/%s is not a well-formed join token (%s, %s)", s.Namespace, s.Name, keyID, keySecretHash)
	}
	if v := s.Data[keyExpiration]; len(v) > 0 {
		t, err := time.Parse(time.RFC3339, string(v))
		if err != nil {
			return nil, fmt.Errorf("join token %s: expiration %q: %w", ti.ID, v, err)
		}
		ti.Expires = &t
	}
	if v := s.Data[keyUsesLimit]; len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil {
			return nil, fmt.Errorf("join token %s: %s %q: %w", ti.ID, keyUsesLimit, v, err)
		}
		ti.UsesLimit = n
		if ti.UsesLeft, err = strconv.Atoi(string(s.Data[keyUsesLeft])); err != nil {
			return nil, fmt.Errorf("join token %s: %s %q: %w", ti.ID, keyUsesLeft, s.Data[keyUsesLeft], err)
		}
	}
	if v := s.Data[keyLabels]; len(v) > 0 {
		l, err := agentapi.ParseLabels(string(v))
		if err != nil {
			return nil, fmt.Errorf("join token %s: %w", ti.ID, err)
		}
		ti.Labels = l
	}
	return ti, nil
}

func (ti *TokenInfo) matches(secret string) bool {
	return subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(ti.hash)) == 1
}

// CreateToken stores a new random token through the API (as an admin)
// and returns it with its expiry (zero: never).
func CreateToken(ctx context.Context, c kubernetes.Interface, o TokenOptions, now time.Time) (Token, time.Time, error) {
	for range 5 {
		tok, err := NewToken()
		if err != nil {
			return Token{}, time.Time{}, err
		}
		sec, err := NewTokenSecret(tok, o, now)
		if err != nil {
			return Token{}, time.Time{}, err
		}
		_, err = c.CoreV1().Secrets(Namespace).Create(ctx, sec, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue // an id drawn twice; draw again
		}
		if err != nil {
			return Token{}, time.Time{}, fmt.Errorf("storing the join token: %w", err)
		}
		var exp time.Time
		if o.TTL > 0 {
			exp, _ = time.Parse(time.RFC3339, string(sec.Data[keyExpiration]))
		}
		return tok, exp, nil
	}
	return Token{}, time.Time{}, errors.New("storing the join token: five random ids were all taken")
}

// ListTokens returns the stored tokens.
func ListTokens(ctx context.Context, c kubernetes.Interface) ([]TokenInfo, error) {
	l, err := c.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(SecretType)})
	if err != nil {
		return nil, fmt.Errorf("listing join tokens: %w", err)
	}
	var out []TokenInfo
	for i := range l.Items {
		if l.Items[i].Type != SecretType {
			continue
		}
		ti, err := parseTokenSecret(&l.Items[i])
		if err != nil {
			continue
		}
		out = append(out, *ti)
	}
	return out, nil
}

// DeleteToken removes a token (by id, or by the whole token).
func DeleteToken(ctx context.Context, c kubernetes.Interface, id string) error {
	if t, err := ParseToken(id); err == nil {
		id = t.ID
	}
	err := c.CoreV1().Secrets(Namespace).Delete(ctx, SecretName(id), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no join token with id %q", id)
	}
	return err
}
