package transport

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Wire format of one frame (all integers little-endian):
//
//	off size field
//	  0    4 magic "HSYN"
//	  4    1 version (FrameVersion)
//	  5    1 flags (FlagChecksum)
//	  6    1 codec
//	  7    1 reserved, 0
//	  8    2 channel
//	 10    2 reserved, 0
//	 12    4 op signature
//	 16    8 seq
//	 24    4 segment
//	 28    4 raw payload length (what the receiver gets back)
//	 32    4 wire payload length (what follows the header)
//	 36    4 CRC-32C of the wire payload (0 when FlagChecksum is clear)
//	 40    4 reserved, 0
//	 44    4 CRC-32C of bytes 0..43
//	 48      wire payload
const (
	FrameHeaderSize = 48
	FrameVersion    = 1
	frameMagic      = "HSYN"

	// MaxFrameLen is the largest payload length the header can describe.
	MaxFrameLen = 1<<32 - 1
)

// Frame flags.
const (
	// FlagChecksum says the frame carries a CRC-32C of its wire payload.
	FlagChecksum uint8 = 1 << 0

	knownFlags = FlagChecksum
)

// FrameHeader is a decoded frame header.
type FrameHeader struct {
	Header
	Flags      uint8
	RawLen     uint32 // payload length after decoding
	WireLen    uint32 // payload length on the wire
	PayloadCRC uint32 // CRC-32C of the wire payload when Flags has FlagChecksum
}

// FrameError says that a peer's byte stream carried something that is not a valid frame. The
// stream cannot be trusted after it: the endpoint stops reading from that peer and every later
// Recv from it returns the same error.
type FrameError struct {
	Rank, Peer int
	Reason     string
	// Header is what the frame header said, when it got as far as being decoded.
	Header *FrameHeader
}

func (e *FrameError) Error() string {
	s := fmt.Sprintf("rank %d: invalid frame from rank %d: %s", e.Rank, e.Peer, e.Reason)
	if e.Header != nil {
		s += fmt.Sprintf(" (frame %v codec=%d raw=%d wire=%d)", e.Header.Header, e.Header.Codec, e.Header.RawLen, e.Header.WireLen)
	}
	return s
}

// crcTable returns the CRC-32C table. crc32.MakeTable caches the Castagnoli table inside the
// standard library and picks the hardware instruction when there is one.
func crcTable() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }

// MarshalFrameHeader writes the header fields and its checksum into b[:FrameHeaderSize].
func MarshalFrameHeader(b []byte, f *FrameHeader, tab *crc32.Table) {
	b = b[:FrameHeaderSize]
	copy(b[0:4], frameMagic)
	b[4] = FrameVersion
	b[5] = f.Flags
	b[6] = uint8(f.Codec)
	b[7] = 0
	binary.LittleEndian.PutUint16(b[8:], uint16(f.Channel))
	binary.LittleEndian.PutUint16(b[10:], 0)
	binary.LittleEndian.PutUint32(b[12:], f.Op)
	binary.LittleEndian.PutUint64(b[16:], f.Seq)
	binary.LittleEndian.PutUint32(b[24:], f.Segment)
	binary.LittleEndian.PutUint32(b[28:], f.RawLen)
	binary.LittleEndian.PutUint32(b[32:], f.WireLen)
	binary.LittleEndian.PutUint32(b[36:], f.PayloadCRC)
	binary.LittleEndian.PutUint32(b[40:], 0)
	binary.LittleEndian.PutUint32(b[44:], crc32.Checksum(b[:44], tab))
}

// DecodeFrameHeader parses and validates a frame header that rank received from peer. It
// checks the magic, version, header checksum, reserved bytes, flags, codec and the lengths
// against maxMessage and against each other. Errors are *FrameError. It never panics.
func DecodeFrameHeader(rank, peer int, b []byte, maxMessage int, tab *crc32.Table) (FrameHeader, error) {
	bad := func(f *FrameHeader, format string, args ...any) (FrameHeader, error) {
		var hp *FrameHeader
		if f != nil {
			c := *f
			hp = &c
		}
		return FrameHeader{}, &FrameError{Rank: rank, Peer: peer, Reason: fmt.Sprintf(format, args...), Header: hp}
	}
	if len(b) < FrameHeaderSize {
		return bad(nil, "header of %d bytes, want %d", len(b), FrameHeaderSize)
	}
	b = b[:FrameHeaderSize]
	if string(b[0:4]) != frameMagic {
		return bad(nil, "bad magic %q, want %q (not a hetsync stream, or the stream lost sync)", b[0:4], frameMagic)
	}
	if b[4] != FrameVersion {
		return bad(nil, "frame version %d, this build speaks version %d", b[4], FrameVersion)
	}
	if got, want := binary.LittleEndian.Uint32(b[44:]), crc32.Checksum(b[:44], tab); got != want {
		return bad(nil, "header checksum %#08x, computed %#08x (corrupted on the wire)", got, want)
	}
	f := FrameHeader{
		Header: Header{
			Channel: Channel(binary.LittleEndian.Uint16(b[8:])),
			Codec:   Codec(b[6]),
			Op:      binary.LittleEndian.Uint32(b[12:]),
			Seq:     binary.LittleEndian.Uint64(b[16:]),
			Segment: binary.LittleEndian.Uint32(b[24:]),
		},
		Flags:      b[5],
		RawLen:     binary.LittleEndian.Uint32(b[28:]),
		WireLen:    binary.LittleEndian.Uint32(b[32:]),
		PayloadCRC: binary.LittleEndian.Uint32(b[36:]),
	}
	if b[7] != 0 || binary.LittleEndian.Uint16(b[10:]) != 0 || binary.LittleEndian.Uint32(b[40:]) != 0 {
		return bad(&f, "reserved header bytes are not zero")
	}
	if f.Flags&^knownFlags != 0 {
		return bad(&f, "unknown flags %#02x", f.Flags&^knownFlags)
	}
	if f.Flags&FlagChecksum == 0 && f.PayloadCRC != 0 {
		return bad(&f, "payload checksum %#08x present without the checksum flag", f.PayloadCRC)
	}
	if err := checkFrameLengths(&f, maxMessage); err != "" {
		return bad(&f, "%s", err)
	}
	return f, nil
}

// checkFrameLengths validates the codec and the two lengths; it returns a reason or "".
func checkFrameLengths(f *FrameHeader, maxMessage int) string {
	raw, wire := uint64(f.RawLen), uint64(f.WireLen)
	if maxMessage <= 0 || maxMessage > MaxFrameLen {
		maxMessage = MaxFrameLen
	}
	limit := uint64(maxMessage)
	if raw > limit {
		return fmt.Sprintf("payload of %d bytes exceeds the %d-byte message limit", raw, limit)
	}
	if wire > limit {
		return fmt.Sprintf("wire payload of %d bytes exceeds the %d-byte message limit", wire, limit)
	}
	if (raw == 0) != (wire == 0) {
		return fmt.Sprintf("raw length %d and wire length %d disagree about an empty payload", raw, wire)
	}
	switch f.Codec {
	case CodecNone:
		if raw != wire {
			return fmt.Sprintf("uncompressed payload with raw length %d != wire length %d", raw, wire)
		}
	case CodecS2, CodecZstd:
	case CodecFP16, CodecBF16:
		if raw%4 != 0 || wire*2 != raw {
			return fmt.Sprintf("16-bit float payload with raw length %d and wire length %d (want raw = 2*wire, a multiple of 4)", raw, wire)
		}
	default:
		return fmt.Sprintf("unknown codec %d", f.Codec)
	}
	return ""
}

// VerifyPayload checks the payload checksum of a frame whose wire payload is wire.
func VerifyPayload(rank, peer int, f *FrameHeader, wire []byte, tab *crc32.Table) error {
	if f.Flags&FlagChecksum == 0 {
		return nil
	}
	return checkCRC(rank, peer, f, crc32.Checksum(wire, tab))
}

func checkCRC(rank, peer int, f *FrameHeader, got uint32) error {
	if f.Flags&FlagChecksum != 0 && got != f.PayloadCRC {
		c := *f
		return &FrameError{Rank: rank, Peer: peer, Header: &c,
			Reason: fmt.Sprintf("payload checksum %#08x, computed %#08x (corrupted on the wire)", f.PayloadCRC, got)}
	}
	return nil
}
