package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// IDX magic numbers: two zero bytes, the element type (0x08 = unsigned byte) and the number of
// dimensions.
const (
	idxMagicImages = 0x00000803 // uint8, 3 dimensions: count, rows, cols
	idxMagicLabels = 0x00000801 // uint8, 1 dimension: count
)

// NumClasses is the number of label values a Fashion-MNIST (or MNIST) label file may hold: 0..9.
const NumClasses = 10

// maxIDXElements bounds count·rows·cols so that a corrupt header cannot ask for an absurd
// allocation; the real training images are 47 040 000 bytes.
const maxIDXElements = 1 << 28

// gzipMagic is the first two bytes of every gzip stream.
var gzipMagic = [2]byte{0x1f, 0x8b}

// Images is the content of an IDX image file. Pixels are scaled to [0, 1] by dividing the stored
// byte by 255; no mean/std normalization is applied (the model may do that itself).
type Images struct {
	N, Rows, Cols int
	Pixels        []float32 // N×Rows×Cols, row-major, image after image
}

// ReadIDXImages reads an IDX3 unsigned-byte image file, raw or gzip-compressed (detected by
// the gzip magic, not by the file name). Every error names the file.
func ReadIDXImages(path string) (*Images, error) {
	raw, err := readIDXFile(path)
	if err != nil {
		return nil, err
	}
	defer raw.close()
	return decodeImages(raw.r, path, raw.size)
}

// ReadIDXLabels reads an IDX1 unsigned-byte label file, raw or gzip-compressed. Labels outside
// 0..NumClasses-1 are an error.
func ReadIDXLabels(path string) ([]uint8, error) {
	raw, err := readIDXFile(path)
	if err != nil {
		return nil, err
	}
	defer raw.close()
	return decodeLabels(raw.r, path, raw.size)
}

// DecodeIDXImages decodes an IDX3 image stream (raw or gzip); name is used in errors.
func DecodeIDXImages(r io.Reader, name string) (*Images, error) {
	br, err := maybeGunzip(bufio.NewReader(r), name)
	if err != nil {
		return nil, err
	}
	return decodeImages(br, name, -1)
}

// DecodeIDXLabels decodes an IDX1 label stream (raw or gzip); name is used in errors.
func DecodeIDXLabels(r io.Reader, name string) ([]uint8, error) {
	br, err := maybeGunzip(bufio.NewReader(r), name)
	if err != nil {
		return nil, err
	}
	return decodeLabels(br, name, -1)
}

type idxSource struct {
	r     io.Reader
	size  int64 // size of the uncompressed payload when known (raw files), else -1
	close func()
}

func readIDXFile(path string) (*idxSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("idx: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("idx: %s: %w", path, err)
	}
	br := bufio.NewReaderSize(f, 1<<16)
	r, err := maybeGunzip(br, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	size := int64(-1)
	if r == io.Reader(br) {
		size = st.Size()
	}
	return &idxSource{r: r, size: size, close: func() { f.Close() }}, nil
}

// maybeGunzip returns a reader over the decompressed stream when br starts with the gzip magic.
func maybeGunzip(br *bufio.Reader, name string) (io.Reader, error) {
	head, err := br.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("idx: %s: %w", name, err)
	}
	if len(head) == 2 && head[0] == gzipMagic[0] && head[1] == gzipMagic[1] {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("idx: %s: bad gzip stream: %w", name, err)
		}
		zr.Multistream(false)
		return &gzipTail{zr: zr, br: br, name: name}, nil
	}
	return br, nil
}

// gzipTail reads one gzip member and reports bytes after it (a second member or junk) as an
// error instead of silently ignoring them.
type gzipTail struct {
	zr   *gzip.Reader
	br   *bufio.Reader
	name string
}

func (g *gzipTail) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	if errors.Is(err, io.EOF) {
		if _, perr := g.br.Peek(1); perr == nil {
			return n, fmt.Errorf("idx: %s: trailing garbage after the gzip stream", g.name)
		}
	} else if err != nil {
		return n, fmt.Errorf("idx: %s: corrupt or truncated gzip stream: %w", g.name, err)
	}
	return n, err
}

func readUint32s(r io.Reader, name string, dst []int) error {
	var word [4]byte
	for i := range dst {
		if _, err := io.ReadFull(r, word[:]); err != nil {
			return truncated(name, "header", err)
		}
		dst[i] = int(binary.BigEndian.Uint32(word[:]))
	}
	return nil
}

func truncated(name, what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("idx: %s: truncated file: %s ends early", name, what)
	}
	return err
}

// readPayload reads exactly n bytes and checks that nothing follows them. When the stream's
// size is unknown (gzip) the buffer grows with the data actually read, so a corrupt header
// that promises far more than the stream holds cannot force a large allocation.
func readPayload(r io.Reader, name string, n int, known bool, what string) ([]byte, error) {
	var buf []byte
	var got int
	var err error
	if known {
		buf = make([]byte, n)
		got, err = io.ReadFull(r, buf)
	} else {
		var b bytes.Buffer
		var m int64
		m, err = io.CopyN(&b, r, int64(n))
		buf, got = b.Bytes(), int(m)
	}
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("idx: %s: truncated file: header promises %d bytes of %s, found %d", name, n, what, got)
		}
		return nil, err
	}
	var one [1]byte
	k, err := io.ReadFull(r, one[:])
	if k > 0 {
		return nil, fmt.Errorf("idx: %s: trailing garbage after %d bytes of %s", name, n, what)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf, nil
}

func decodeImages(r io.Reader, name string, size int64) (*Images, error) {
	var hdr [4]int
	if err := readUint32s(r, name, hdr[:1]); err != nil {
		return nil, err
	}
	if magic := uint32(hdr[0]); magic != idxMagicImages {
		return nil, wrongMagic(name, magic, idxMagicImages, "images")
	}
	if err := readUint32s(r, name, hdr[1:]); err != nil {
		return nil, err
	}
	n, rows, cols := hdr[1], hdr[2], hdr[3]
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("idx: %s: wrong dimensions: %d×%d×%d (rows and cols must be positive)", name, n, rows, cols)
	}
	// Each factor is below 2^32: bounding rows·cols first keeps the product of all three
	// below 2^60, so it cannot wrap around to a small number.
	perImage := uint64(rows) * uint64(cols)
	total := uint64(n) * min(perImage, maxIDXElements+1)
	if perImage > maxIDXElements || total > maxIDXElements {
		return nil, fmt.Errorf("idx: %s: wrong dimensions: %d×%d×%d exceeds %d bytes", name, n, rows, cols, maxIDXElements)
	}
	if size >= 0 && uint64(size) < 16+total {
		return nil, fmt.Errorf("idx: %s: truncated file: header promises %d×%d×%d bytes, file has %d after the header", name, n, rows, cols, size-16)
	}
	buf, err := readPayload(r, name, int(total), size >= 0, "pixels")
	if err != nil {
		return nil, err
	}
	pix := make([]float32, len(buf))
	for i, b := range buf {
		pix[i] = float32(b) / 255
	}
	return &Images{N: n, Rows: rows, Cols: cols, Pixels: pix}, nil
}

func decodeLabels(r io.Reader, name string, size int64) ([]uint8, error) {
	var hdr [2]int
	if err := readUint32s(r, name, hdr[:1]); err != nil {
		return nil, err
	}
	if magic := uint32(hdr[0]); magic != idxMagicLabels {
		return nil, wrongMagic(name, magic, idxMagicLabels, "labels")
	}
	if err := readUint32s(r, name, hdr[1:]); err != nil {
		return nil, err
	}
	n := hdr[1]
	if uint64(n) > maxIDXElements {
		return nil, fmt.Errorf("idx: %s: wrong dimensions: %d labels exceeds %d", name, n, maxIDXElements)
	}
	if size >= 0 && size < 8+int64(n) {
		return nil, fmt.Errorf("idx: %s: truncated file: header promises %d labels, file has %d bytes after the header", name, n, size-8)
	}
	labels, err := readPayload(r, name, n, size >= 0, "labels")
	if err != nil {
		return nil, err
	}
	for i, l := range labels {
		if int(l) >= NumClasses {
			return nil, fmt.Errorf("idx: %s: label %d at index %d out of range 0..%d", name, l, i, NumClasses-1)
		}
	}
	return labels, nil
}

func wrongMagic(name string, got, want uint32, kind string) error {
	hint := ""
	switch got {
	case idxMagicImages:
		hint = " (this is an image file)"
	case idxMagicLabels:
		hint = " (this is a label file)"
	}
	return fmt.Errorf("idx: %s: wrong magic 0x%08x, want 0x%08x for %s%s", name, got, want, kind, hint)
}
