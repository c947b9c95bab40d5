package audit

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Caps of each field, in bytes as written (JSON-escaped). Valid values of
// the API's own fields are shorter (names are at most 253 bytes); what
// may be longer is what a client sends as it likes: its User-Agent, the
// path of a refused request, a name in a URL.
const (
	capUserAgent = 256
	capPath      = 1024
	capReason    = 1024
	capSourceIP  = 64
	capVerb      = 32
	capName      = 256 // user, each group, apiGroup, resource, subresource, namespace, name
	maxGroups    = 32
	// minLineBytes is the least MaxLineBytes may be: an entry cut to its
	// time, user, verb and code always fits.
	minLineBytes = 512
)

// cutter truncates an entry's fields to their caps divided by scale.
type cutter struct {
	scale int
	cut   bool
}

// str cuts s to limit divided by the scale.
func (c *cutter) str(s string, limit int) string { return c.fixed(s, limit/c.scale) }

// fixed cuts s to limit: at most limit bytes as written, the end replaced
// by "…[N bytes]" with s's length.
func (c *cutter) fixed(s string, limit int) string {
	if jsonLen(s) <= limit {
		return s
	}
	c.cut = true
	marker := fmt.Sprintf("…[%d bytes]", len(s))
	room := limit - len(marker)
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if n += runeJSONLen(r, size); n > room {
			return s[:i] + marker
		}
		i += size
	}
	return s + marker // not reached: s is longer than limit
}

func (c *cutter) entry(e Entry) Entry {
	e.User = c.str(e.User, capName)
	if n := maxGroups / c.scale; len(e.Groups) > n {
		c.cut = true
		e.Groups = append(e.Groups[:n:n], fmt.Sprintf("…[%d more groups]", len(e.Groups)-n))
	}
	if len(e.Groups) > 0 {
		groups := make([]string, len(e.Groups))
		for i, g := range e.Groups {
			groups[i] = c.str(g, capName)
		}
		e.Groups = groups
	}
	e.SourceIP = c.str(e.SourceIP, capSourceIP)
	e.UserAgent = c.str(e.UserAgent, capUserAgent)
	e.Verb = c.fixed(e.Verb, capVerb) // short enough not to scale
	e.APIGroup = c.str(e.APIGroup, capName)
	e.Resource = c.str(e.Resource, capName)
	e.Subresource = c.str(e.Subresource, capName)
	e.Namespace = c.str(e.Namespace, capName)
	e.Name = c.str(e.Name, capName)
	e.Path = c.str(e.Path, capPath)
	e.Reason = c.str(e.Reason, capReason)
	e.Truncated = e.Truncated || c.cut
	return e
}

// encode is e's line, newline included, at most MaxLineBytes long: each
// field is cut to its cap, and while the line is still too long, every
// cap is halved. Entries within the caps are written as they are.
func (l *Log) encode(e Entry) ([]byte, error) {
	for scale := 1; scale <= 16; scale *= 2 {
		c := &cutter{scale: scale}
		line, err := json.Marshal(c.entry(e))
		if err != nil {
			return nil, err
		}
		if len(line)+1 <= l.opts.MaxLineBytes {
			return append(line, '\n'), nil
		}
	}
	c := &cutter{scale: 1}
	short := Entry{Time: e.Time, User: c.fixed(e.User, 128), Verb: c.fixed(e.Verb, capVerb), Code: e.Code, Truncated: true}
	line, err := json.Marshal(short)
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
}

// jsonLen is how many bytes encoding/json writes for s's characters.
func jsonLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		n += runeJSONLen(r, size)
		i += size
	}
	return n
}

// runeJSONLen bounds the bytes encoding/json writes for one decoded rune
// (HTML characters escaped, invalid bytes written as \ufffd).
func runeJSONLen(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1:
		return 6
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6
	}
	return size
}

// dropCause says why refusals were not written.
type dropCause uint8

const (
	dropBudget dropCause = 1 << iota
	dropHistory
)

// budget is a token bucket of refusals, with the count of those dropped
// since the last one written.
type budget struct {
	tokens  float64
	last    time.Time
	dropped int64
	since   time.Time
	lastIP  string
	causes  dropCause
}

func (b *budget) refill(now time.Time, o Options) {
	if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = min(float64(o.RefusalBurst), b.tokens+d*o.RefusalRate)
		b.last = now
	}
}

func (b *budget) take(now time.Time, o Options) bool {
	if o.RefusalRate < 0 {
		return true
	}
	b.refill(now, o)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (b *budget) full(now time.Time, o Options) bool {
	if o.RefusalRate < 0 {
		return true
	}
	b.refill(now, o)
	return b.tokens >= float64(o.RefusalBurst)
}

func (b *budget) drop(now time.Time, ip string, cause dropCause) {
	if b.dropped == 0 {
		b.since, b.causes = now, 0
	}
	b.dropped++
	b.causes |= cause
	if ip != "" {
		b.lastIP = ip
	}
}

func (l *Log) budgetLocked(user string, now time.Time) *budget {
	b := l.budgets[user]
	if b == nil {
		b = &budget{tokens: float64(l.opts.RefusalBurst), last: now}
		l.budgets[user] = b
	}
	return b
}

// summaryLine is the entry that counts b's dropped refusals.
func (l *Log) summaryLine(user string, b *budget, now time.Time) []byte {
	who := "unauthenticated clients"
	if user != Anonymous {
		who = user
	}
	var why []string
	if b.causes&dropBudget != 0 {
		why = append(why, fmt.Sprintf("over the audit log's budget of %g refusals a second (burst %d)", l.opts.RefusalRate, l.opts.RefusalBurst))
	}
	if b.causes&dropHistory != 0 {
		why = append(why, fmt.Sprintf("writing them would have rotated away entries younger than %s", l.opts.MinHistory))
	}
	since := b.since.UTC()
	e := Entry{Time: now.UTC(), User: user, SourceIP: b.lastIP, Verb: VerbDropped, Dropped: b.dropped, DroppedSince: &since,
		Reason: fmt.Sprintf("%d refusals of %s were not written since %s: %s; sourceIP is the last one's",
			b.dropped, who, since.Format(time.RFC3339), strings.Join(why, "; "))}
	line, err := l.encode(e)
	if err != nil { // not reached: an Entry always encodes
		return []byte(fmt.Sprintf("{\"verb\":%q,\"dropped\":%d}\n", VerbDropped, b.dropped))
	}
	return line
}

// writeSummaryLocked writes b's count of dropped refusals and resets it;
// false when MinHistory held it back.
func (l *Log) writeSummaryLocked(user string, b *budget, now time.Time) bool {
	if !l.writeLocked(l.summaryLine(user, b, now), true) {
		return false
	}
	b.dropped, b.causes, b.lastIP = 0, 0, ""
	return true
}
