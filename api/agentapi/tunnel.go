package agentapi

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// PathTunnel is where a device opens its tunnel: one connection that
// carries all of its requests to the hub, and their answers, in frames of
// this package's own.
//
// Over HTTP/2 each device costs the hub a goroutine serving its
// connection, one reading it and one per open stream, HPACK tables, a
// framer's buffers and a 4 KiB writer per stream: about 40 KB a device
// beside TLS, most of a 10,000-device hub's memory. A tunnel costs one
// goroutine reading the connection, and buffers only while a frame is
// being written.
//
// The device sends GET PathTunnel over HTTP/1.1 with "Connection:
// Upgrade" and "Upgrade: " TunnelProtocol, authenticated by its client
// certificate as any request. The hub answers 101 Switching Protocols and
// the connection carries frames from then on (ReadTunnelFrame,
// AppendTunnelFrame). Each request in it is served, authenticated and
// authorized as it would have been on a connection of its own; a hub that
// answers anything but 101 serves no tunnels, and the device sends its
// requests as usual.
const PathTunnel = "/tunnel/v1"

// TunnelProtocol is the Upgrade token of a tunnel.
const TunnelProtocol = "flotilla-tunnel/1"

// TunnelKind says what a tunnel frame carries.
type TunnelKind uint8

const (
	// TunnelRequest (device → hub): a request, as HTTP/1.1 puts it on the
	// wire: request line, headers, and a body of Content-Length bytes.
	// The frame's id names the request in the frames about it; a device
	// does not reuse an id while the request is open.
	TunnelRequest TunnelKind = 1
	// TunnelCancel (device → hub): the device no longer wants the
	// request's answer; the hub ends it and sends TunnelEnd.
	TunnelCancel TunnelKind = 2
	// TunnelHead (hub → device): the answer's status line and headers, as
	// HTTP/1.1 puts them on the wire; its body follows in TunnelData
	// frames (whatever its headers say of its length).
	TunnelHead TunnelKind = 3
	// TunnelData (hub → device): the next bytes of the answer's body.
	TunnelData TunnelKind = 4
	// TunnelEnd (hub → device): the answer is complete; a payload, when
	// there is one, says why it ended before it was (the body is cut).
	TunnelEnd TunnelKind = 5
	// TunnelPing and TunnelPong keep an idle tunnel known to be alive:
	// either side answers a ping with a pong of the same id.
	TunnelPing TunnelKind = 6
	TunnelPong TunnelKind = 7
)

// TunnelFrame is one frame of a tunnel.
type TunnelFrame struct {
	ID      uint32
	Kind    TunnelKind
	Payload []byte
}

// tunnelHeader: id (4), kind (1), payload length (4).
const tunnelHeader = 9

// MaxTunnelPayload bounds a frame's payload: a request frame holds its
// whole body, which the hub bounds well below this.
const MaxTunnelPayload = 8 << 20

// TunnelPingInterval is how long a side of a tunnel may send nothing
// before it pings; a side that has heard nothing for TunnelIdleTimeout
// takes the tunnel for dead and closes it.
const (
	TunnelPingInterval = 30 * time.Second
	TunnelIdleTimeout  = 100 * time.Second
)

// AppendTunnelFrame appends f's encoding to b.
func AppendTunnelFrame(b []byte, f TunnelFrame) []byte {
	b = binary.BigEndian.AppendUint32(b, f.ID)
	b = append(b, byte(f.Kind))
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.Payload)))
	return append(b, f.Payload...)
}

// ReadTunnelHeader reads a frame up to its payload: the frame without
// it, and the payload's length, which the reader reads next (or
// discards). io.EOF only between frames.
func ReadTunnelHeader(r io.Reader) (TunnelFrame, int, error) {
	var h [tunnelHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return TunnelFrame{}, 0, err
	}
	f := TunnelFrame{ID: binary.BigEndian.Uint32(h[0:4]), Kind: TunnelKind(h[4])}
	n := binary.BigEndian.Uint32(h[5:9])
	if n > MaxTunnelPayload {
		return TunnelFrame{}, 0, fmt.Errorf("%w: %d bytes in a tunnel frame (at most %d)", ErrFrameTooLarge, n, MaxTunnelPayload)
	}
	if f.Kind < TunnelRequest || f.Kind > TunnelPong {
		return TunnelFrame{}, 0, fmt.Errorf("tunnel: frame of unknown kind %d", f.Kind)
	}
	return f, int(n), nil
}

// ReadTunnelFrame reads one frame into buf when it is large enough (the
// payload is valid until buf is used again). io.EOF only between frames.
func ReadTunnelFrame(r io.Reader, buf []byte) (TunnelFrame, []byte, error) {
	f, n, err := ReadTunnelHeader(r)
	if err != nil {
		return TunnelFrame{}, buf, err
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	f.Payload = buf[:n]
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return TunnelFrame{}, buf, err
	}
	return f, buf, nil
}
