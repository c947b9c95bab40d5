package watchmux

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"flotilla.dev/flotilla/api/agentapi"
)

const (
	// gather: watches asked for together (the informers of an agent that
	// starts) share the stream's first opening.
	gather = 20 * time.Millisecond
	// rejoin: a watch that joins an open stream waits this long for
	// others before the stream is opened again with all of them.
	rejoin = 100 * time.Millisecond
	// initialWait: a stream is not opened again while one of its watches
	// still receives its initial state (it could not resume), up to this.
	initialWait = 10 * time.Second
	// fallbackFor: how long a hub that serves no multiplexed watches is
	// sent them as GETs before it is asked again (it may be upgraded).
	fallbackFor = 10 * time.Minute
	// minBackoff, maxBackoff: the wait before opening again a stream that
	// the hub ended at once, or that could not be opened. The longest
	// wait is client-go's reflector's: a fleet that lost its hub comes
	// back spread over tens of seconds, not in one herd of handshakes.
	// (With 10 s, 10,000 simulated devices on the hub's two cores came
	// back slower: more of their handshakes timed out and began again.)
	minBackoff = 200 * time.Millisecond
	maxBackoff = 30 * time.Second
	// shortLived: a stream that ended sooner than this was not healthy.
	shortLived = time.Second
	// queued: frames a watch's reader may be behind before the stream
	// waits for it.
	queued = 16
)

var (
	// errBodyClosed is what a watch's body reads after it was closed.
	errBodyClosed = errors.New("watchmux: read on a closed watch")
	// errUnanswered: the stream ended before the hub answered for the
	// watch.
	errUnanswered = errors.New("watchmux: the hub ended the watches' stream before answering this watch")
)

// Transport carries the watches sent through it on one multiplexed
// stream to the hub and passes every other request to its base.
type Transport struct {
	base http.RoundTripper

	mu            sync.Mutex
	subs          map[uint32]*sub
	nextID        uint32
	running       bool // the stream's loop runs
	fallbackUntil time.Time
	// cancel ends the stream being opened or served, so that it is
	// opened again (nil: none); reopening is the timer that will.
	cancel    context.CancelFunc
	reopening *time.Timer
	// closedSince counts the watches closed by their readers since the
	// stream opened: the hub serves them until it is opened again.
	closedSince int
}

// New wraps base, the transport to the hub (with its TLS and
// credentials).
func New(base http.RoundTripper) *Transport {
	return &Transport{base: base, subs: map[uint32]*sub{}}
}

// sub is one watch. Its fields but the channels are the Transport's,
// under its lock.
type sub struct {
	id  uint32
	req *http.Request
	// answer takes the round trip's result, once.
	answer chan answer
	// frames are the payloads for the watch's reader; closed when the
	// watch ended. done is closed when the reader closed the body.
	frames chan []byte
	done   chan struct{}

	started   bool
	startedAt time.Time
	// resumable: the watch has seen every event up to rv and may resume
	// from it.
	resumable bool
	rv        int64
	ended     bool
}

type answer struct {
	resp     *http.Response
	err      error
	fallback bool // send the watch as a GET
}

// isWatch: a GET with watch=true, as client-go sends every watch.
func isWatch(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

// RoundTrip serves a watch from the stream and passes anything else on.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !isWatch(req) {
		return t.base.RoundTrip(req)
	}
	t.mu.Lock()
	if time.Now().Before(t.fallbackUntil) {
		t.mu.Unlock()
		return t.base.RoundTrip(req)
	}
	s := &sub{id: t.nextID, req: req, answer: make(chan answer, 1), frames: make(chan []byte, queued), done: make(chan struct{})}
	t.nextID++
	t.subs[s.id] = s
	if !t.running {
		t.running = true
		go t.run()
	} else {
		t.rejoinLocked()
	}
	t.mu.Unlock()
	select {
	case a := <-s.answer:
		if a.fallback {
			return t.base.RoundTrip(req)
		}
		return a.resp, a.err
	case <-req.Context().Done():
		t.remove(s)
		return nil, req.Context().Err()
	}
}

// remove forgets a watch its reader closed, or whose request ended.
func (t *Transport) remove(s *sub) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.subs[s.id] != s {
		return
	}
	delete(t.subs, s.id)
	close(s.done)
	t.closedSince++
	if t.closedSince > len(t.subs) {
		// Most of what the hub serves is read by nobody.
		t.rejoinLocked()
	}
}

// endLocked ends a watch: its reader reads EOF, and its client asks again.
func (t *Transport) endLocked(s *sub) {
	if s.ended {
		return
	}
	s.ended = true
	if t.subs[s.id] == s {
		delete(t.subs, s.id)
	}
	close(s.frames)
}

// rejoinLocked has the open stream opened again soon, with the watches
// that joined meanwhile. Without an open stream the loop takes them in.
func (t *Transport) rejoinLocked() {
	if t.cancel == nil || t.reopening != nil {
		return
	}
	t.reopening = time.AfterFunc(rejoin, t.reopen)
}

func (t *Transport) reopen() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reopening = nil
	if t.cancel == nil {
		return
	}
	for _, s := range t.subs {
		if s.started && !s.resumable && time.Since(s.startedAt) < initialWait {
			t.reopening = time.AfterFunc(rejoin, t.reopen)
			return
		}
	}
	t.cancel()
}

// run opens the stream and serves it, again and again, for as long as
// there are watches.
func (t *Transport) run() {
	var backoff time.Duration
	for {
		time.Sleep(gather)
		t.mu.Lock()
		if len(t.subs) == 0 {
			t.running = false
			t.mu.Unlock()
			return
		}
		batch := make([]*sub, 0, len(t.subs))
		for _, s := range t.subs {
			batch = append(batch, s)
		}
		slices.SortFunc(batch, func(a, b *sub) int { return int(a.id) - int(b.id) })
		body := t.requestLocked(batch)
		ctx, cancel := context.WithCancel(context.Background())
		t.cancel, t.closedSince = cancel, 0
		t.mu.Unlock()

		opened := time.Now()
		healthy, retryAfter := t.serve(ctx, batch, body)
		intended := ctx.Err() != nil
		cancel()
		t.mu.Lock()
		t.cancel = nil
		if t.reopening != nil {
			t.reopening.Stop()
			t.reopening = nil
		}
		for _, s := range batch {
			switch {
			case s.ended || t.subs[s.id] != s:
			case s.started && !s.resumable:
				// A watch still in its initial state cannot resume.
				t.endLocked(s)
			case !s.started && !intended:
				// The hub ended the stream without answering for it:
				// its client asks again, with its own backoff.
				delete(t.subs, s.id)
				s.ended = true
				s.answer <- answer{err: errUnanswered}
			}
		}
		t.mu.Unlock()
		switch {
		case intended || (healthy && time.Since(opened) >= shortLived):
			backoff = 0
		case retryAfter > 0:
			// The hub said when (a hub starting, or too busy): then,
			// give or take half, so that a fleet told the same does not
			// come back in one instant.
			backoff = 0
			time.Sleep(retryAfter/2 + rand.N(retryAfter))
		default:
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			time.Sleep(backoff/2 + rand.N(backoff))
		}
	}
}

// requestLocked names the batch's watches: a watch the stream served
// before resumes from its revision.
func (t *Transport) requestLocked(batch []*sub) []byte {
	var req agentapi.WatchesRequest
	for _, s := range batch {
		q := s.req.URL.Query()
		if s.started && s.resumable {
			q.Set("resourceVersion", strconv.FormatInt(s.rv, 10))
			q.Del("sendInitialEvents")
		}
		req.Watches = append(req.Watches, agentapi.WatchRequest{ID: s.id, Path: s.req.URL.Path, Query: q.Encode(),
			Accept: s.req.Header.Get("Accept")})
	}
	b, _ := json.Marshal(&req)
	return b
}

// serve opens the stream and hands its frames to their watches until it
// ends; healthy is false when it could not be opened or broke, and
// retryAfter is how long the hub asked to wait when it refused it.
func (t *Transport) serve(ctx context.Context, batch []*sub, body []byte) (healthy bool, retryAfter time.Duration) {
	first := batch[0].req
	u := &url.URL{Scheme: first.URL.Scheme, Host: first.URL.Host, Path: agentapi.PathWatches}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		t.failOpen(ctx, batch, func(*sub) answer { return answer{err: err} })
		return false, 0
	}
	// The credentials and the user agent client-go's wrappers set on the
	// watches' requests.
	for k, v := range first.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", agentapi.ContentTypeWatches)
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		t.failOpen(ctx, batch, func(*sub) answer { return answer{err: err} })
		return false, 0
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Type") == agentapi.ContentTypeWatches:
	case resp.StatusCode == http.StatusOK, resp.StatusCode == http.StatusNotFound,
		resp.StatusCode == http.StatusForbidden, resp.StatusCode == http.StatusMethodNotAllowed:
		// An older hub: it does not know the path, and refuses a device
		// a path it does not know.
		t.mu.Lock()
		t.fallbackUntil = time.Now().Add(fallbackFor)
		t.mu.Unlock()
		t.failOpen(ctx, batch, func(*sub) answer { return answer{fallback: true} })
		return true, 0
	default:
		// Refused as a whole (too many requests, unauthorized...): each
		// watch is answered what its GET would have been.
		refusal, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		t.failOpen(ctx, batch, func(s *sub) answer {
			return answer{resp: &http.Response{StatusCode: resp.StatusCode, Status: resp.Status,
				Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor, Header: resp.Header.Clone(),
				Body: io.NopCloser(bytes.NewReader(refusal)), ContentLength: int64(len(refusal)), Request: s.req}}
		})
		return false, retryAfterOf(resp.Header)
	}

	// Read as it is: the body is buffered below (HTTP/2's receive
	// buffer, net/http's reader), and a reader of its own here held 32
	// KiB per device for the stream's life.
	var buf []byte
	for {
		var f agentapi.Frame
		f, buf, err = agentapi.ReadFrame(resp.Body, buf)
		if err != nil {
			return errors.Is(err, io.EOF), 0
		}
		if !t.handle(ctx, f) {
			return true, 0
		}
	}
}

// retryAfterOf reads a Retry-After in seconds, as the hub sends it (0
// when there is none), bounded by maxBackoff.
func retryAfterOf(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || n <= 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, maxBackoff)
}

// failOpen answers the watches that were waiting for the stream with
// what answerFor says, and ends those it served (their clients ask again), unless the
// stream was ended on purpose: then they all wait for the next one.
func (t *Transport) failOpen(ctx context.Context, batch []*sub, answerFor func(*sub) answer) {
	if ctx.Err() != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range batch {
		if s.ended || t.subs[s.id] != s {
			continue
		}
		if s.started {
			t.endLocked(s)
			continue
		}
		delete(t.subs, s.id)
		s.ended = true
		s.answer <- answerFor(s)
	}
}

// handle gives a frame to its watch; false when the stream must end.
func (t *Transport) handle(ctx context.Context, f agentapi.Frame) bool {
	t.mu.Lock()
	s := t.subs[f.ID]
	if s == nil || s.ended {
		t.mu.Unlock()
		return true
	}
	resumable := f.Flags&agentapi.FlagResumable != 0
	switch f.Kind {
	case agentapi.FrameStart:
		s.resumable, s.rv = resumable, f.Revision
		first := !s.started
		s.started, s.startedAt = true, time.Now()
		t.mu.Unlock()
		if first {
			s.answer <- answer{resp: &http.Response{Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/2.0", ProtoMajor: 2,
				Header: http.Header{"Content-Type": {string(f.Payload)}}, ContentLength: -1, Request: s.req,
				Body: &body{t: t, s: s, ctx: s.req.Context()}}}
		}
		return true
	case agentapi.FrameRefused:
		if s.started {
			// Served before, refused now (its revision is too old, or
			// it may no longer watch): its client asks again, and hears
			// why.
			t.endLocked(s)
			t.mu.Unlock()
			return true
		}
		delete(t.subs, s.id)
		s.ended = true
		t.mu.Unlock()
		s.answer <- answer{resp: refusedResponse(s.req, f.Payload)}
		return true
	case agentapi.FrameEvent:
		t.mu.Unlock()
		select {
		case s.frames <- bytes.Clone(f.Payload):
		case <-s.done:
			return true
		case <-ctx.Done():
			// Not delivered: the next stream sends it again.
			return false
		}
		t.mu.Lock()
		if resumable && !s.ended {
			s.resumable, s.rv = true, f.Revision
		}
		t.mu.Unlock()
		return true
	case agentapi.FrameProgress:
		if resumable {
			s.resumable, s.rv = true, f.Revision
		}
	case agentapi.FrameEnd:
		if s.resumable {
			t.rejoinLocked()
		} else {
			t.endLocked(s)
		}
	}
	t.mu.Unlock()
	return true
}

// refusedResponse is the answer the hub gave for the watch's GET.
func refusedResponse(req *http.Request, payload []byte) *http.Response {
	var rw agentapi.RefusedWatch
	if err := json.Unmarshal(payload, &rw); err != nil || rw.Code == 0 {
		rw = agentapi.RefusedWatch{Code: http.StatusBadGateway, ContentType: "text/plain",
			Body: fmt.Appendf(nil, "the hub's refusal of this watch could not be read: %v", err)}
	}
	h := http.Header{}
	if rw.ContentType != "" {
		h.Set("Content-Type", rw.ContentType)
	}
	if rw.RetryAfter != "" {
		h.Set("Retry-After", rw.RetryAfter)
	}
	return &http.Response{Status: fmt.Sprintf("%d %s", rw.Code, http.StatusText(rw.Code)), StatusCode: rw.Code,
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Request: req,
		Body: io.NopCloser(bytes.NewReader(rw.Body)), ContentLength: int64(len(rw.Body))}
}

// body is a watch's answer: its frames, as its own stream would carry
// them.
type body struct {
	t   *Transport
	s   *sub
	ctx context.Context
	cur []byte
}

func (b *body) Read(p []byte) (int, error) {
	for len(b.cur) == 0 {
		select {
		case f, ok := <-b.s.frames:
			if !ok {
				return 0, io.EOF
			}
			b.cur = f
		case <-b.s.done:
			return 0, errBodyClosed
		case <-b.ctx.Done():
			b.t.remove(b.s)
			return 0, b.ctx.Err()
		}
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}

func (b *body) Close() error {
	b.t.remove(b.s)
	return nil
}
