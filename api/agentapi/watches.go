package agentapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// PathWatches serves a device's watches multiplexed on one stream. A
// device keeps several watches (its Node and pods, the Services, its
// site's EndpointSlices, the ConfigMaps and Secrets its pods use); served
// one HTTP/2 stream each, every one of them holds a handler goroutine, a
// write buffer and a request's state on the hub for as long as it runs,
// which for 10,000 devices is most of the hub's memory. One stream
// carries them all instead.
//
// The device POSTs a WatchesRequest (JSON) naming each watch as the GET
// it would otherwise send (path and query). Each watch is authorized and
// served as that GET would be; the answer is a stream of frames
// (WriteFrame, ReadFrame), each about one of the watches.
const PathWatches = "/watch/v1/streams"

// ContentTypeWatches is the answer's content type.
const ContentTypeWatches = "application/vnd.flotilla.watches"

// MaxWatchesPerStream bounds a request's watches, and MaxWatchesRequestBytes
// its body.
const (
	MaxWatchesPerStream    = 1024
	MaxWatchesRequestBytes = 256 << 10
)

// WatchesRequest names the watches of one stream.
type WatchesRequest struct {
	Watches []WatchRequest `json:"watches"`
}

// WatchRequest is one watch: the GET that would have asked for it alone.
type WatchRequest struct {
	// ID names the watch in the answer's frames; unique in the request.
	ID uint32 `json:"id"`
	// Path is the watch's resource path (/api/v1/pods, ...), Query its
	// query (watch=true, fieldSelector, resourceVersion, ...).
	Path  string `json:"path"`
	Query string `json:"query,omitempty"`
	// Accept is the content types the watch's frames may be in, as the
	// GET's Accept header.
	Accept string `json:"accept,omitempty"`
}

// FrameKind says what a frame tells of its watch.
type FrameKind uint8

const (
	// FrameStart: the watch is served; the payload is its content type
	// (what the GET's answer would have had).
	FrameStart FrameKind = 1
	// FrameRefused: the watch was not served; the payload is a
	// RefusedWatch (JSON). Nothing follows about the watch.
	FrameRefused FrameKind = 2
	// FrameEvent: the payload is one frame of the watch exactly as its
	// own stream would have carried it (a JSON line, or a length-prefixed
	// protobuf frame).
	FrameEvent FrameKind = 3
	// FrameProgress: the watch has seen everything up to the frame's
	// revision and may resume from it; no payload, nothing for the
	// watch's reader.
	FrameProgress FrameKind = 4
	// FrameEnd: the hub ended the watch (it fell behind, or its client
	// must ask again); a client resumes it from its revision when it may.
	FrameEnd FrameKind = 5
)

// FlagResumable on a frame says that the watch may resume from the
// frame's revision: it has seen every event up to it. Events of a watch's
// initial state (sent before it catches up) do not carry it.
const FlagResumable uint8 = 1

// RefusedWatch is the answer the watch's GET would have had.
type RefusedWatch struct {
	Code        int    `json:"code"`
	ContentType string `json:"contentType,omitempty"`
	RetryAfter  string `json:"retryAfter,omitempty"`
	Body        []byte `json:"body,omitempty"`
}

// Frame is one frame of a watches stream.
type Frame struct {
	ID    uint32
	Kind  FrameKind
	Flags uint8
	// Revision is the resourceVersion the frame brings its watch to
	// (meaningful with FlagResumable).
	Revision int64
	Payload  []byte
}

// frameHeader: id (4), kind (1), flags (1), revision (8), payload length (4).
const frameHeader = 18

// MaxFramePayload bounds a frame's payload (an object's frame is at most
// the hub's object size limit, well below it).
const MaxFramePayload = 64 << 20

// AppendFrame appends f's encoding to b.
func AppendFrame(b []byte, f Frame) []byte {
	b = binary.BigEndian.AppendUint32(b, f.ID)
	b = append(b, byte(f.Kind), f.Flags)
	b = binary.BigEndian.AppendUint64(b, uint64(f.Revision))
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.Payload)))
	return append(b, f.Payload...)
}

// ErrFrameTooLarge is a frame whose payload exceeds MaxFramePayload.
var ErrFrameTooLarge = errors.New("watches stream: frame too large")

// ReadFrame reads one frame; buf is reused for its payload when large
// enough. io.EOF only between frames.
func ReadFrame(r io.Reader, buf []byte) (Frame, []byte, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, buf, err
	}
	f := Frame{ID: binary.BigEndian.Uint32(h[0:4]), Kind: FrameKind(h[4]), Flags: h[5],
		Revision: int64(binary.BigEndian.Uint64(h[6:14]))}
	n := binary.BigEndian.Uint32(h[14:18])
	if n > MaxFramePayload {
		return Frame{}, buf, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	f.Payload = buf[:n]
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, buf, err
	}
	return f, buf, nil
}
