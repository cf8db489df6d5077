package data

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzDecodeIDX: no byte stream makes the IDX decoders panic or ask for more memory than the
// stream holds, and what they accept is consistent with its header (one pixel per image
// element, labels in range).
func FuzzDecodeIDX(f *testing.F) {
	pix := pattern(2 * 3 * 4)
	for _, b := range [][]byte{
		idxImages(idxMagicImages, 2, 3, 4, pix),
		idxImages(idxMagicImages, 2, 3, 4, pix[:10]),
		idxImages(idxMagicImages, 1<<30, 28, 28, nil),
		idxImages(idxMagicImages, 1<<22, 1<<21, 1<<21, nil), // the product wraps around 2^64
		idxImages(0x00000903, 2, 28, 28, nil),
		idxLabels(idxMagicLabels, 3, []byte{0, 9, 3}),
		idxLabels(idxMagicLabels, 3, []byte{0, 10, 3}),
		idxLabels(idxMagicLabels, 1<<30, nil),
		gz(f, idxImages(idxMagicImages, 2, 3, 4, pix)),
		gz(f, idxLabels(idxMagicLabels, 2, []byte{1, 2})),
		{0x1f, 0x8b}, {},
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		img, err := DecodeIDXImages(bytes.NewReader(b), "fuzz-images")
		switch {
		case err != nil && !strings.Contains(err.Error(), "fuzz-images"):
			t.Fatalf("images: error %v does not name the stream", err)
		case err == nil && (img.N < 0 || img.Rows < 1 || img.Cols < 1 || len(img.Pixels)%(img.Rows*img.Cols) != 0 ||
			len(img.Pixels)/img.Rows/img.Cols != img.N):
			t.Fatalf("images: accepted %d×%d×%d with %d pixels", img.N, img.Rows, img.Cols, len(img.Pixels))
		}
		labels, err := DecodeIDXLabels(bytes.NewReader(b), "fuzz-labels")
		switch {
		case err != nil && !strings.Contains(err.Error(), "fuzz-labels"):
			t.Fatalf("labels: error %v does not name the stream", err)
		case err == nil:
			for i, l := range labels {
				if int(l) >= NumClasses {
					t.Fatalf("labels: accepted label %d at %d", l, i)
				}
			}
		}
	})
}
