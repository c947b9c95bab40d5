package agentapi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestFramesRoundTrip(t *testing.T) {
	in := []Frame{
		{ID: 1, Kind: FrameStart, Payload: []byte("application/json")},
		{ID: 1 << 31, Kind: FrameEvent, Flags: FlagResumable, Revision: 1 << 40, Payload: []byte(`{"type":"ADDED"}`)},
		{ID: 3, Kind: FrameEnd},
	}
	var b []byte
	for _, f := range in {
		b = AppendFrame(b, f)
	}
	r := bytes.NewReader(b)
	var buf []byte
	for i, want := range in {
		var got Frame
		var err error
		got, buf, err = ReadFrame(r, buf)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.ID != want.ID || got.Kind != want.Kind || got.Flags != want.Flags || got.Revision != want.Revision || !bytes.Equal(got.Payload, want.Payload) {
			t.Errorf("frame %d: %+v, want %+v", i, got, want)
		}
	}
	if _, _, err := ReadFrame(r, buf); err != io.EOF {
		t.Errorf("after the last frame: %v, want EOF", err)
	}
	cr := bytes.NewReader(b[:len(b)-1])
	for i := range len(in) {
		if _, _, err := ReadFrame(cr, nil); err != nil {
			if i != len(in)-1 || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("a stream cut in its last frame: frame %d: %v", i, err)
			}
			break
		}
		if i == len(in)-1 {
			t.Error("a stream cut in its last frame read without an error")
		}
	}
	cut := AppendFrame(nil, Frame{ID: 1, Kind: FrameEvent, Payload: []byte("abc")})
	if _, _, err := ReadFrame(bytes.NewReader(cut[:len(cut)-1]), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a frame cut in its payload: %v, want unexpected EOF", err)
	}
	huge := AppendFrame(nil, Frame{ID: 1, Kind: FrameEvent})
	binary.BigEndian.PutUint32(huge[14:], MaxFramePayload+1)
	if _, _, err := ReadFrame(bytes.NewReader(huge), nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("a frame over the limit: %v, want ErrFrameTooLarge", err)
	}
}
