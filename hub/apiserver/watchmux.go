package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/agentapi"
)

// Multiplexed watches (agentapi.PathWatches): one stream carries all of a
// client's watches, each authorized and served as its own GET would be.
// The stream costs the hub one handler goroutine, one HTTP/2 stream and
// one request's state however many watches it carries; the watchers share
// one ready channel, so the handler wakes once for all of them.

// muxWatch is one watch of a multiplexed stream.
type muxWatch struct {
	id  uint32
	run *watchRun
}

// serveWatches serves a POST of agentapi.PathWatches: it opens the
// stream's watches, then streams their frames until they end.
//
// A device's stream parks on its handler goroutine for as long as the
// device is connected, so what sits on that stack then is paid per
// device: Go halves a goroutine's stack only while less than a quarter of
// it is in use, and a handler stack in use past 4 KiB stays 16 KiB (10,000
// devices: 160 MB instead of 80). Opening the watches takes a deep stack
// and returns before the stream waits; the stream's loop and what calls it
// (ServeHTTP, request.serve) keep their frames small.
func (s *Server) serveWatches(w http.ResponseWriter, r *http.Request) {
	ws, err := s.openWatches(w, r)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	if ws != nil {
		defer ws.close()
		ws.stream(r.Context().Done())
	}
}

// watchStream is one POST of agentapi.PathWatches being streamed.
type watchStream struct {
	s       *Server
	w       http.ResponseWriter
	flusher http.Flusher
	ready   chan struct{}
	watches []muxWatch
	frames  []byte
}

// openWatches reads the request, subscribes its watches and sends what
// they start with. It returns the stream to run, nil when there is nothing
// to stream (every watch refused, or the client gone), or an error to
// answer before anything was sent. It is never inlined: its frame must
// not join serveWatches' (see there).
//
//go:noinline
func (s *Server) openWatches(w http.ResponseWriter, r *http.Request) (*watchStream, error) {
	if r.Method != http.MethodPost {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed,
			Reason: metav1.StatusReasonMethodNotAllowed, Message: fmt.Sprintf("%s takes POST, not %s", agentapi.PathWatches, r.Method)}}
	}
	select {
	case <-s.ready:
	default:
		return nil, errStarting()
	}
	var req agentapi.WatchesRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, agentapi.MaxWatchesRequestBytes+1))
	if err != nil {
		return nil, badRequest("reading the watches: %v", err)
	}
	// The request lives as long as the stream, for hours; the copy of
	// its body read before it was admitted is not needed past here.
	r.Body = http.NoBody
	if len(body) > agentapi.MaxWatchesRequestBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("a watches request holds at most %d bytes", agentapi.MaxWatchesRequestBytes))
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, badRequest("the body of %s is not a watches request (JSON {\"watches\":[{\"id\":1,\"path\":\"/api/v1/pods\",\"query\":\"watch=true\"}]}): %v", agentapi.PathWatches, err)
	}
	if n := len(req.Watches); n == 0 || n > agentapi.MaxWatchesPerStream {
		return nil, badRequest("a watches request names 1 to %d watches, not %d", agentapi.MaxWatchesPerStream, n)
	}
	seen := make(map[uint32]bool, len(req.Watches))
	for _, wq := range req.Watches {
		if seen[wq.ID] {
			return nil, badRequest("watch id %d appears twice in the request; each watch needs an id of its own", wq.ID)
		}
		seen[wq.ID] = true
	}

	ws := &watchStream{s: s, w: w, ready: make(chan struct{}, 1), watches: make([]muxWatch, 0, len(req.Watches))}
	ws.flusher, _ = w.(http.Flusher)
	for _, wq := range req.Watches {
		run, refused := s.startMuxWatch(r, wq, ws.ready)
		if refused != nil {
			payload, _ := json.Marshal(refused)
			ws.frames = agentapi.AppendFrame(ws.frames, agentapi.Frame{ID: wq.ID, Kind: agentapi.FrameRefused, Payload: payload})
			continue
		}
		ws.watches = append(ws.watches, muxWatch{id: wq.ID, run: run})
		start := agentapi.Frame{ID: wq.ID, Kind: agentapi.FrameStart, Payload: []byte(run.contentType())}
		if !run.initial {
			start.Flags, start.Revision = agentapi.FlagResumable, run.fromRev
		}
		ws.frames = agentapi.AppendFrame(ws.frames, start)
	}

	w.Header().Set("Content-Type", agentapi.ContentTypeWatches)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	for _, mw := range ws.watches {
		mw.sendBacklog(s, &ws.frames)
	}
	if !ws.write() || len(ws.watches) == 0 {
		ws.close()
		return nil, nil
	}
	return ws, nil
}

// stream sends the watches' frames as they come, until every watch has
// ended, the stream has lasted as long as a watch would (the client opens
// it again and resumes each watch from the revision its frames last
// brought it to), or the client is gone.
func (ws *watchStream) stream(gone <-chan struct{}) {
	timeout, _ := ws.s.watchTimeout("")
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(bookmarkInterval)
	defer tick.Stop()
	for {
		var more bool
		select {
		case <-ws.ready:
			more = ws.drain()
		case <-tick.C:
			more = ws.progress()
		case <-deadline.C:
		case <-gone:
		}
		if !more {
			return
		}
	}
}

// drain sends what the watches have and drops those that ended; false
// when the stream is done. Never inlined, as progress: the stream's loop
// keeps a small frame (see serveWatches).
//
//go:noinline
func (ws *watchStream) drain() bool {
	for i := 0; i < len(ws.watches); i++ {
		mw := ws.watches[i]
		if !mw.drain(ws.s, &ws.frames) {
			ws.s.cache.unsubscribe(mw.run.watcher)
			ws.watches = append(ws.watches[:i], ws.watches[i+1:]...)
			i--
		}
	}
	if len(ws.watches) == 0 {
		// Every watch ended: the client opens a stream again with
		// those it resumes.
		ws.write()
		return false
	}
	return ws.write()
}

// progress sends each watch's progress frame.
//
//go:noinline
func (ws *watchStream) progress() bool {
	for _, mw := range ws.watches {
		mw.progress(ws.s, &ws.frames)
	}
	return ws.write()
}

// write sends the frames gathered: a wake-up for many watches is one
// write and one flush. False when the client is gone.
func (ws *watchStream) write() bool {
	if len(ws.frames) == 0 {
		return true
	}
	_, err := ws.w.Write(ws.frames)
	ws.frames = ws.frames[:0]
	if cap(ws.frames) > 32<<10 {
		// A burst (an initial state, a rollout) is not kept for the
		// stream's life: the device holds it for hours.
		ws.frames = nil
	}
	if ws.flusher != nil {
		ws.flusher.Flush()
	}
	return err == nil
}

// close ends the watches still subscribed.
func (ws *watchStream) close() {
	for _, mw := range ws.watches {
		ws.s.cache.unsubscribe(mw.run.watcher)
	}
	ws.watches = nil
}

// startMuxWatch serves one watch of a stream as its GET would be served:
// parsed, authorized, subscribed. A watch that would have been refused is
// answered what the GET would have been answered.
func (s *Server) startMuxWatch(r *http.Request, wq agentapi.WatchRequest, ready chan struct{}) (*watchRun, *agentapi.RefusedWatch) {
	// Clone copies the header too: the changes below stay the watch's.
	sub := r.Clone(r.Context())
	sub.Method, sub.Body, sub.ContentLength = http.MethodGet, http.NoBody, 0
	sub.URL = &url.URL{Path: wq.Path, RawQuery: wq.Query}
	sub.RequestURI = sub.URL.RequestURI()
	// The watch gets a request record of its own, made as every
	// request's is (authorizers read its field selector there), with the
	// stream's caller.
	sub, rr := s.startRequest(sub)
	if parent := recordFrom(r.Context()); parent != nil {
		rr.user, rr.cert = parent.user, parent.cert
	}
	sub.Header.Del("Content-Type")
	sub.Header.Set("Accept", wq.Accept)
	ri, isResource, err := parseRequest(sub)
	if err == nil && (!isResource || ri.Verb != "watch") {
		err = badRequest("watch %d: %s?%s is not a watch of a resource (its query needs watch=true)", wq.ID, wq.Path, wq.Query)
	}
	if err != nil {
		return nil, s.refusal(sub, err, nil)
	}
	user := UserFrom(r.Context())
	attrs := Attributes{User: user, Verb: ri.Verb, APIGroup: ri.Resource.GVR.Group, Resource: ri.Resource.GVR.Resource,
		Subresource: ri.Subresource, Namespace: ri.Namespace, Name: ri.Name}
	// Authorized here rather than with s.authorize, which records its
	// decision as the request's: the stream's record stays the stream's.
	ok, reason, err := s.cfg.Authorizer.Authorize(sub.Context(), attrs)
	if err != nil {
		return nil, s.refusal(sub, apierrors.NewInternalError(fmt.Errorf("authorizing: %w", err)), &ri)
	}
	if !ok {
		refused := s.refusal(sub, forbidden(attrs, &ri, reason), &ri)
		s.auditRefusedWatch(sub, attrs, refused.Code, reason)
		return nil, refused
	}
	run, err := s.startWatch(sub, &ri, &attrs, ready)
	if err != nil {
		return nil, s.refusal(sub, err, &ri)
	}
	return run, nil
}

// auditRefusedWatch records a watch of the stream that was refused, as the
// refusal of its GET would have been recorded (the stream itself is not:
// it is a read).
func (s *Server) auditRefusedWatch(r *http.Request, a Attributes, code int, reason string) {
	if s.cfg.Audit == nil {
		return
	}
	s.cfg.Audit.Audit(AuditEvent{Time: s.now().UTC(), User: a.User, SourceIP: sourceIP(r), UserAgent: r.UserAgent(), Code: code, Reason: reason,
		Verb: a.Verb, APIGroup: a.APIGroup, Resource: a.Resource, Subresource: a.Subresource, Namespace: a.Namespace, Name: a.Name})
}

// refusal is the answer err would have been to the watch's GET.
func (s *Server) refusal(r *http.Request, err error, ri *requestInfo) *agentapi.RefusedWatch {
	rec := &bufferedResponse{header: http.Header{}}
	s.writeError(rec, r, err, ri)
	return rec.refused()
}

func (mw muxWatch) sendBacklog(s *Server, frames *[]byte) {
	mw.run.sendBacklog(mw.sender(s, frames))
	if mw.run.initial && !mw.run.initialEnd {
		// The initial state is out: from here on the watch may resume.
		*frames = agentapi.AppendFrame(*frames, agentapi.Frame{ID: mw.id, Kind: agentapi.FrameProgress,
			Flags: agentapi.FlagResumable, Revision: mw.run.lastRev})
	}
}

// drain sends the watch's queued events; false when the watch ended (its
// client must ask again, or it fell behind), after saying so.
func (mw muxWatch) drain(s *Server, frames *[]byte) bool {
	if mw.run.drain(mw.sender(s, frames)) {
		return true
	}
	*frames = agentapi.AppendFrame(*frames, agentapi.Frame{ID: mw.id, Kind: agentapi.FrameEnd})
	return false
}

// progress tells the client how far the watch has come: a bookmark when
// it asked for bookmarks, otherwise a progress frame that only the
// client's demultiplexer sees, so that it can resume the watch from a
// recent revision whatever the watch asked for.
func (mw muxWatch) progress(s *Server, frames *[]byte) {
	line, rev := mw.run.progress(s.cache)
	if rev < mw.run.fromRev {
		return
	}
	if line != nil {
		mw.sender(s, frames)(line, rev)
		return
	}
	*frames = agentapi.AppendFrame(*frames, agentapi.Frame{ID: mw.id, Kind: agentapi.FrameProgress,
		Flags: agentapi.FlagResumable, Revision: rev})
}

// sender appends each of the watch's lines as an event frame; rev 0 is
// an event of an initial state, from which the watch cannot resume.
func (mw muxWatch) sender(s *Server, frames *[]byte) func(line []byte, rev int64) bool {
	return func(line []byte, rev int64) bool {
		f := agentapi.Frame{ID: mw.id, Kind: agentapi.FrameEvent, Revision: rev, Payload: line}
		if rev > 0 {
			f.Flags = agentapi.FlagResumable
		}
		*frames = agentapi.AppendFrame(*frames, f)
		s.metrics.watchEvents.Inc()
		return true
	}
}

// bufferedResponse keeps the answer to a watch that was refused.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferedResponse) refused() *agentapi.RefusedWatch {
	return &agentapi.RefusedWatch{Code: b.code, ContentType: b.header.Get("Content-Type"),
		RetryAfter: b.header.Get("Retry-After"), Body: b.body.Bytes()}
}
