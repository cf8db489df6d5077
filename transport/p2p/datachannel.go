package p2p

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"
)

// The data channel is the record layer of the "tls" path once its hello is done. The TLS 1.3
// handshake (crypto/tls) authenticates both ranks and agrees on a secret; each side then takes
// keys from it with the TLS exporter (RFC 8446 section 7.5) and the bulk traffic moves in
// records of this package's own:
//
//	4 bytes  big-endian: bit 31 "close", bits 0..30 the ciphertext length (plaintext + 16)
//	n bytes  AEAD ciphertext and tag; nonce = IV xor the record's sequence number,
//	         additional data = the 4 header bytes
//
// The AEAD follows the suite the handshake negotiated: crypto/tls picks AES-128-GCM when both
// ends have AES instructions and ChaCha20-Poly1305 when one lacks them, where it is the faster.
//
// Each direction has its own key, IV and counter, so a record cannot be replayed, reordered,
// reflected or dropped without the next one failing authentication. Why not TLS's own records:
// crypto/tls caps a record at 16 KiB and writes each with a system call of its own, copies
// every payload into its record before sealing it and every plaintext out of its buffer after
// opening it. Here a record holds up to dataRecordMax bytes, Seal reads the caller's bytes and
// writes the ciphertext into the send buffer in one pass, and Open reads the receive buffer
// and writes the plaintext into the caller's buffer in one pass: the AEAD is the copy.
const (
	dataRecordMax     = 256 << 10 // plaintext bytes per record
	dataRecordFirst   = 32 << 10  // plaintext bytes of the first record of a write
	dataRecordHdr     = 4
	dataRecordTag     = 16
	dataRecordClose   = 1 << 31
	dataKeyLen        = 32 // exported per direction; AES-128 keys with the first 16 bytes
	dataIVLen         = 12
	dataExporterLabel = "EXPORTER-hetsync data channel 1"
)

// dataChannel is one direct connection's record layer. One goroutine may write and another
// read at the same time; Close may come from anywhere.
type dataChannel struct {
	conn net.Conn

	wmu  sync.Mutex
	seal cipher.AEAD
	wiv  [dataIVLen]byte
	wseq uint64
	wbuf []byte
	werr error // sticky: a record was lost or cut, later ones would not authenticate

	open  cipher.AEAD
	riv   [dataIVLen]byte
	rseq  uint64
	rbuf  []byte // raw bytes from conn; rbuf[roff:rend] not yet consumed
	roff  int
	rend  int
	plain []byte // opened plaintext not yet returned (in rbuf)
	rerr  error  // sticky: end of stream, or a record that failed
}

// newDataChannel derives the channel's keys from tc's completed handshake and speaks over
// raw, the connection under tc. Nothing of tc may be buffered: see handshakeConn.
func newDataChannel(tc *tls.Conn, raw net.Conn, isClient bool) (*dataChannel, error) {
	st := tc.ConnectionState()
	km, err := st.ExportKeyingMaterial(dataExporterLabel, nil, dataKeyMaterial)
	if err != nil {
		return nil, fmt.Errorf("deriving the data channel keys: %w", err)
	}
	return newDataChannelKeys(raw, km, isClient, st.CipherSuite == tls.TLS_CHACHA20_POLY1305_SHA256)
}

// dataKeyMaterial is how many exported bytes key a channel: a key and an IV per direction.
const dataKeyMaterial = 2 * (dataKeyLen + dataIVLen)

// newDataChannelKeys is the channel over raw keyed by km (dataKeyMaterial bytes): its first
// half keys the dialer's (client's) direction, the second the listener's. It seals with
// ChaCha20-Poly1305 when chacha is set, else AES-128-GCM.
func newDataChannelKeys(raw net.Conn, km []byte, isClient, chacha bool) (*dataChannel, error) {
	if len(km) != dataKeyMaterial {
		return nil, fmt.Errorf("data channel: %d bytes of key material, want %d", len(km), dataKeyMaterial)
	}
	toListener, toDialer := km[:dataKeyLen+dataIVLen], km[dataKeyLen+dataIVLen:]
	w, r := toDialer, toListener
	if isClient {
		w, r = toListener, toDialer
	}
	d := &dataChannel{conn: raw,
		wbuf: make([]byte, dataRecordHdr+dataRecordMax+dataRecordTag),
		rbuf: make([]byte, 2*(dataRecordHdr+dataRecordMax+dataRecordTag))}
	var err error
	if d.seal, err = newAEAD(w[:dataKeyLen], chacha); err != nil {
		return nil, err
	}
	if d.open, err = newAEAD(r[:dataKeyLen], chacha); err != nil {
		return nil, err
	}
	copy(d.wiv[:], w[dataKeyLen:])
	copy(d.riv[:], r[dataKeyLen:])
	return d, nil
}

func newAEAD(key []byte, chacha bool) (cipher.AEAD, error) {
	if chacha {
		return chacha20poly1305.New(key)
	}
	b, err := aes.NewCipher(key[:16])
	if err != nil {
		return nil, fmt.Errorf("data channel cipher: %w", err)
	}
	return cipher.NewGCM(b)
}

// nonce is iv xor seq, seq big-endian in the last 8 bytes (as TLS 1.3 builds its nonces).
func nonce(iv *[dataIVLen]byte, seq uint64) [dataIVLen]byte {
	n := *iv
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	for i := range s {
		n[dataIVLen-8+i] ^= s[i]
	}
	return n
}

// sealRecord seals p (at most dataRecordMax bytes) with flags into d.wbuf; d.wmu is held.
func (d *dataChannel) sealRecord(p []byte, flags uint32) []byte {
	hdr := d.wbuf[:dataRecordHdr]
	binary.BigEndian.PutUint32(hdr, uint32(len(p)+dataRecordTag)|flags)
	n := nonce(&d.wiv, d.wseq)
	d.wseq++
	return d.seal.Seal(hdr, n[:], p, hdr)
}

// Write sends p in records, each with one write to the socket. The first record holds
// dataRecordFirst bytes and each next one twice as many, up to dataRecordMax: the receiver
// opens the first while the sender seals the second, as with small records, and a long
// write still goes out in few large ones, as system calls and headers are paid per record.
func (d *dataChannel) Write(p []byte) (int, error) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.werr != nil {
		return 0, d.werr
	}
	n, size := 0, dataRecordFirst
	for n < len(p) {
		chunk := p[n:min(len(p), n+size)]
		size = min(2*size, dataRecordMax)
		if _, err := d.conn.Write(d.sealRecord(chunk, 0)); err != nil {
			d.werr = fmt.Errorf("secure data channel unusable after a failed write: %w", err)
			return n, err
		}
		n += len(chunk)
	}
	return n, nil
}

// CloseWrite sends the close record and half-closes the socket: the peer reads io.EOF after
// everything sent before it.
func (d *dataChannel) CloseWrite() error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.werr != nil {
		return d.werr
	}
	if _, err := d.conn.Write(d.sealRecord(nil, dataRecordClose)); err != nil {
		d.werr = fmt.Errorf("secure data channel unusable after a failed write: %w", err)
		return err
	}
	d.werr = errors.New("secure data channel closed for writing")
	if cw, ok := d.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Read returns the plaintext of the next record, or what is left of it. When p can hold the
// whole record's plaintext it is opened straight into p; otherwise it is opened in place and
// copied out over this and the following calls.
func (d *dataChannel) Read(p []byte) (int, error) {
	if len(d.plain) > 0 {
		n := copy(p, d.plain)
		d.plain = d.plain[n:]
		return n, nil
	}
	if d.rerr != nil {
		return 0, d.rerr
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if err := d.fill(dataRecordHdr); err != nil {
			return 0, err
		}
		word := binary.BigEndian.Uint32(d.rbuf[d.roff:])
		flags, ctLen := word&dataRecordClose, int(word&^dataRecordClose)
		if ctLen < dataRecordTag || ctLen > dataRecordMax+dataRecordTag {
			d.rerr = fmt.Errorf("secure data channel: a record announces %d bytes, want [%d, %d] (not a hetsync data channel, or corrupted)",
				ctLen, dataRecordTag, dataRecordMax+dataRecordTag)
			return 0, d.rerr
		}
		if err := d.fill(dataRecordHdr + ctLen); err != nil {
			return 0, err
		}
		hdr := d.rbuf[d.roff : d.roff+dataRecordHdr]
		ct := d.rbuf[d.roff+dataRecordHdr : d.roff+dataRecordHdr+ctLen]
		dst := ct[:0]
		direct := len(p) >= ctLen-dataRecordTag
		if direct {
			dst = p[:0]
		}
		n := nonce(&d.riv, d.rseq)
		out, err := d.open.Open(dst, n[:], ct, hdr)
		d.roff += dataRecordHdr + ctLen
		if err != nil {
			d.rerr = errors.New("secure data channel: a record failed authentication (corrupted or forged on the way)")
			return 0, d.rerr
		}
		d.rseq++
		if flags != 0 {
			d.rerr = io.EOF
			return 0, io.EOF
		}
		if len(out) == 0 {
			continue
		}
		if direct {
			return len(out), nil
		}
		k := copy(p, out)
		d.plain = out[k:]
		return k, nil
	}
}

// fill reads from the socket until rbuf[roff:] holds at least need bytes, reading ahead as
// far as the buffer allows so that small records come in batches.
func (d *dataChannel) fill(need int) error {
	if d.roff == d.rend {
		d.roff, d.rend = 0, 0
	}
	if len(d.rbuf)-d.roff < need {
		d.rend = copy(d.rbuf, d.rbuf[d.roff:d.rend])
		d.roff = 0
	}
	for d.rend-d.roff < need {
		n, err := d.conn.Read(d.rbuf[d.rend:])
		d.rend += n
		if n > 0 {
			continue
		}
		if errors.Is(err, io.EOF) {
			if d.rend > d.roff {
				d.rerr = fmt.Errorf("secure data channel: the connection ended inside a record: %w", io.ErrUnexpectedEOF)
			} else {
				d.rerr = errors.New("secure data channel: the connection ended without a close record (the peer closed it abruptly, or the network cut it)")
			}
			return d.rerr
		}
		if err == nil {
			err = io.ErrNoProgress
		}
		// A deadline or a closed socket: what arrived so far stays in rbuf, and a later Read
		// (after a deadline was moved) goes on from there.
		return err
	}
	return nil
}

// handshakeConn is the socket as crypto/tls sees it during the handshake and the hello: it
// never hands out more than the rest of the current TLS record, so that crypto/tls cannot
// read ahead into the data channel records that follow the hello on the same socket.
type handshakeConn struct {
	net.Conn
	hdr  [5]byte // TLS record header: type, version, length
	hn   int     // header bytes read from the socket
	hout int     // header bytes handed out
	left int     // body bytes of the current record not yet handed out
}

func (h *handshakeConn) Read(p []byte) (int, error) {
	if h.hn == 5 && h.hout == 5 && h.left == 0 {
		h.hn, h.hout = 0, 0
	}
	for h.hn < 5 {
		n, err := h.Conn.Read(h.hdr[h.hn:])
		h.hn += n
		if h.hn == 5 {
			h.left = int(binary.BigEndian.Uint16(h.hdr[3:5]))
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if h.hout < 5 {
		n := copy(p, h.hdr[h.hout:])
		h.hout += n
		return n, nil
	}
	if len(p) > h.left {
		p = p[:h.left]
	}
	n, err := h.Conn.Read(p)
	h.left -= n
	return n, err
}

// atBoundary says whether every byte read from the socket was handed to crypto/tls and the
// last record is complete.
func (h *handshakeConn) atBoundary() bool {
	return h.left == 0 && h.hout == h.hn && (h.hn == 0 || h.hn == 5)
}
