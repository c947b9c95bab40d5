package pki

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Session tickets let a client that connected once resume later with an
// abbreviated TLS 1.3 handshake: no certificate is signed, sent or
// verified, on either side. After a hub restart every device reconnects at
// once, and the handshakes are most of what the hub (and each device)
// then spends its CPU on. Go's TLS stack would encrypt tickets with keys
// made at start, so a restarted hub could not read the tickets its
// devices hold; the hub keeps its ticket keys in TicketKeysFile instead.
//
// A ticket stands for the client's certificate (the handshake that issued
// it checked the client holds the key), so the keys are as secret as the
// CA key beside them: whoever has them can forge a ticket for any device's
// certificate. They are rotated daily and kept for as long as a ticket is
// valid (Go's TLS 1.3 tickets last at most 7 days); a resumed connection
// presents the certificate it was issued for, still checked on every
// request (VerifyClient), so an expired certificate is refused as on a
// full handshake.
const (
	TicketKeysFile = "session-tickets.key"

	ticketKeyRotation = 24 * time.Hour
	ticketKeyRetain   = 8 * 24 * time.Hour
	ticketKeyIDLen    = 4
)

// ticketKey is one key tickets are sealed with.
type ticketKey struct {
	created time.Time
	key     [32]byte
	id      [ticketKeyIDLen]byte
	aead    cipher.AEAD
}

func newTicketKey(created time.Time, key [32]byte) (ticketKey, error) {
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return ticketKey{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return ticketKey{}, err
	}
	sum := sha256.Sum256(key[:])
	k := ticketKey{created: created, key: key, aead: aead}
	copy(k.id[:], sum[:ticketKeyIDLen])
	return k, nil
}

// readTicketKeys reads the keys file: one key a line, newest first,
// "<RFC 3339 time made> <64 hex digits>".
func readTicketKeys(path string) ([]ticketKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []ticketKey
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		when, hexKey, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		created, terr := time.Parse(time.RFC3339, when)
		raw, herr := hex.DecodeString(hexKey)
		if !ok || terr != nil || herr != nil || len(raw) != 32 {
			return nil, fmt.Errorf("%s line %d: want \"<RFC 3339 time> <64 hex digits>\"", path, n)
		}
		k, err := newTicketKey(created, [32]byte(raw))
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no key", path)
	}
	return keys, nil
}

// rotateTicketKeys makes a new key when the newest is a day old (or there
// is none, or the file cannot be read: tickets are disposable, a lost key
// only costs clients a full handshake), drops keys no ticket can still
// need, and writes the file when anything changed.
func (p *PKI) rotateTicketKeys() error {
	p.ticketMu.Lock()
	defer p.ticketMu.Unlock()
	path := filepath.Join(p.dir, TicketKeysFile)
	now := p.now()
	keys := p.tickets.Load()
	if keys == nil {
		read, err := readTicketKeys(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			p.log.Warn("session ticket keys unreadable; making new ones (clients do a full handshake once)", "err", err)
		default:
			keys = &read
		}
	}
	var kept []ticketKey
	if keys != nil {
		for _, k := range *keys {
			// A key from the future (a clock set back) is kept, not trusted
			// for age: it ages out once the clock passes it.
			if now.Sub(k.created) < ticketKeyRetain {
				kept = append(kept, k)
			}
		}
	}
	changed := keys == nil || len(kept) != len(*keys)
	if len(kept) == 0 || now.Sub(kept[0].created) >= ticketKeyRotation {
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return fmt.Errorf("pki: new session ticket key: %w", err)
		}
		k, err := newTicketKey(now.UTC().Truncate(time.Second), raw)
		if err != nil {
			return fmt.Errorf("pki: new session ticket key: %w", err)
		}
		kept = append([]ticketKey{k}, kept...)
		changed = true
	}
	if !changed {
		p.tickets.Store(&kept)
		return nil
	}
	var buf bytes.Buffer
	for _, k := range kept {
		fmt.Fprintf(&buf, "%s %s\n", k.created.UTC().Format(time.RFC3339), hex.EncodeToString(k.key[:]))
	}
	if err := writeFileAtomic(path, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	p.tickets.Store(&kept)
	return nil
}

// wrapSession seals a session into a ticket with the newest key: the
// key's id, a nonce, then the sealed session.
func (p *PKI) wrapSession(_ tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	keys := p.tickets.Load()
	if keys == nil {
		return nil, errors.New("pki: no session ticket key")
	}
	k := (*keys)[0]
	plain, err := ss.Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]byte, ticketKeyIDLen+k.aead.NonceSize(), ticketKeyIDLen+k.aead.NonceSize()+len(plain)+k.aead.Overhead())
	copy(out, k.id[:])
	if _, err := rand.Read(out[ticketKeyIDLen:]); err != nil {
		return nil, err
	}
	return k.aead.Seal(out, out[ticketKeyIDLen:], plain, k.id[:]), nil
}

// unwrapSession opens a ticket sealed by wrapSession with any key kept. A
// ticket it cannot open (a key rotated out, another hub's, garbage) is
// not an error: the client gets a full handshake.
func (p *PKI) unwrapSession(identity []byte, _ tls.ConnectionState) (*tls.SessionState, error) {
	keys := p.tickets.Load()
	if keys == nil || len(identity) < ticketKeyIDLen {
		return nil, nil
	}
	for _, k := range *keys {
		if !bytes.Equal(identity[:ticketKeyIDLen], k.id[:]) {
			continue
		}
		rest := identity[ticketKeyIDLen:]
		if len(rest) < k.aead.NonceSize() {
			return nil, nil
		}
		plain, err := k.aead.Open(nil, rest[:k.aead.NonceSize()], rest[k.aead.NonceSize():], k.id[:])
		if err != nil {
			return nil, nil
		}
		ss, err := tls.ParseSessionState(plain)
		if err != nil {
			return nil, nil
		}
		return ss, nil
	}
	return nil, nil
}
