package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// idxImages builds an IDX3 image file body with the given header values and pixels.
func idxImages(magic uint32, n, rows, cols int, pixels []byte) []byte {
	var b bytes.Buffer
	for _, v := range []uint32{magic, uint32(n), uint32(rows), uint32(cols)} {
		binary.Write(&b, binary.BigEndian, v)
	}
	b.Write(pixels)
	return b.Bytes()
}

func idxLabels(magic uint32, n int, labels []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, magic)
	binary.Write(&b, binary.BigEndian, uint32(n))
	b.Write(labels)
	return b.Bytes()
}

func gz(t testing.TB, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeFile(t testing.TB, dir, name string, body []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, body, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// pattern returns n deterministic bytes.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

func TestReadIDXValid(t *testing.T) {
	pix := pattern(3 * 2 * 4)
	pix[0], pix[1], pix[2] = 0, 255, 51
	labels := []byte{0, 9, 4}
	for _, compress := range []bool{false, true} {
		name := map[bool]string{false: "raw", true: "gzip"}[compress]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			imgBody, lblBody := idxImages(idxMagicImages, 3, 2, 4, pix), idxLabels(idxMagicLabels, 3, labels)
			if compress {
				imgBody, lblBody = gz(t, imgBody), gz(t, lblBody)
			}
			img, err := ReadIDXImages(writeFile(t, dir, "img", imgBody))
			if err != nil {
				t.Fatal(err)
			}
			if img.N != 3 || img.Rows != 2 || img.Cols != 4 || len(img.Pixels) != 24 {
				t.Fatalf("got N=%d %d×%d with %d pixels", img.N, img.Rows, img.Cols, len(img.Pixels))
			}
			for i, p := range img.Pixels {
				if want := float32(pix[i]) / 255; p != want {
					t.Fatalf("pixel %d = %v, want %v", i, p, want)
				}
			}
			if img.Pixels[0] != 0 || img.Pixels[1] != 1 || img.Pixels[2] != float32(0.2) {
				t.Fatalf("scaling: got %v %v %v, want 0 1 0.2", img.Pixels[0], img.Pixels[1], img.Pixels[2])
			}
			got, err := ReadIDXLabels(writeFile(t, dir, "lbl", lblBody))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, labels) {
				t.Fatalf("labels %v, want %v", got, labels)
			}
			// The stream decoders agree with the file readers.
			img2, err := DecodeIDXImages(bytes.NewReader(imgBody), "stream")
			if err != nil || len(img2.Pixels) != 24 {
				t.Fatalf("DecodeIDXImages: %v", err)
			}
			if _, err := DecodeIDXLabels(bytes.NewReader(lblBody), "stream"); err != nil {
				t.Fatalf("DecodeIDXLabels: %v", err)
			}
		})
	}
}

func TestReadIDXErrors(t *testing.T) {
	goodPix := pattern(2 * 28 * 28)
	goodImg := idxImages(idxMagicImages, 2, 28, 28, goodPix)
	goodLbl := idxLabels(idxMagicLabels, 2, []byte{1, 2})
	cases := []struct {
		name   string
		labels bool // read as labels instead of images
		body   []byte
		want   string
	}{
		{"images/label-file", false, goodLbl, "wrong magic 0x00000801"},
		{"labels/image-file", true, goodImg, "wrong magic 0x00000803"},
		{"images/bad-magic", false, idxImages(0x00000903, 2, 28, 28, goodPix), "wrong magic"},
		{"images/empty", false, nil, "truncated file"},
		{"labels/empty", true, nil, "truncated file"},
		{"images/short-header", false, goodImg[:10], "truncated file"},
		{"labels/short-header", true, goodLbl[:6], "truncated file"},
		{"images/zero-rows", false, idxImages(idxMagicImages, 2, 0, 28, nil), "wrong dimensions"},
		{"images/huge", false, idxImages(idxMagicImages, 1<<30, 28, 28, nil), "wrong dimensions"},
		{"images/truncated", false, goodImg[:len(goodImg)-1], "truncated file"},
		{"labels/truncated", true, goodLbl[:len(goodLbl)-1], "truncated file"},
		{"images/trailing", false, append(append([]byte(nil), goodImg...), 0), "trailing garbage"},
		{"labels/trailing", true, append(append([]byte(nil), goodLbl...), 1, 2), "trailing garbage"},
		{"labels/out-of-range", true, idxLabels(idxMagicLabels, 3, []byte{0, 10, 1}), "label 10 at index 1 out of range 0..9"},
		{"images/gz-header-promises-more", false, gz(t, idxImages(idxMagicImages, 100000, 28, 28, goodPix)), "header promises 78400000 bytes of pixels, found 1568"},
		{"images/gz-truncated", false, gz(t, goodImg[:len(goodImg)-5]), "truncated file"},
		{"labels/gz-trailing-inside", true, gz(t, append(append([]byte(nil), goodLbl...), 7)), "trailing garbage"},
		{"labels/gz-junk-after-member", true, append(gz(t, goodLbl), 'x', 'y'), "trailing garbage"},
		{"images/gz-cut-stream", false, func() []byte { b := gz(t, goodImg); return b[:len(b)/2] }(), "truncated"},
		{"labels/gz-bad-header", true, []byte{0x1f, 0x8b, 0, 0, 0}, "gzip"},
		{"labels/gz-out-of-range", true, gz(t, idxLabels(idxMagicLabels, 1, []byte{200})), "out of range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "file-"+strings.ReplaceAll(tc.name, "/", "-"), tc.body)
			var err error
			if tc.labels {
				_, err = ReadIDXLabels(path)
			} else {
				_, err = ReadIDXImages(path)
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q: want it to contain %q and the file name %s", err, tc.want, path)
			}
		})
	}
}

func TestReadIDXMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nope")
	_, err := ReadIDXImages(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("got %v, want an error naming %s", err, p)
	}
}

func TestLoadIDXPair(t *testing.T) {
	dir := t.TempDir()
	img3 := writeFile(t, dir, "img3", idxImages(idxMagicImages, 3, 28, 28, pattern(3*784)))
	lbl3 := writeFile(t, dir, "lbl3.gz", gz(t, idxLabels(idxMagicLabels, 3, []byte{3, 1, 4})))
	lbl2 := writeFile(t, dir, "lbl2", idxLabels(idxMagicLabels, 2, []byte{3, 1}))
	img1614 := writeFile(t, dir, "img-16x14", idxImages(idxMagicImages, 3, 16, 14, pattern(3*16*14)))
	cases := []struct {
		name, img, lbl, want string
	}{
		{"ok", img3, lbl3, ""},
		{"count mismatch", img3, lbl2, "mislabeled"},
		{"not 28x28", img1614, lbl3, "wrong dimensions: images are 16×14"},
		{"swapped", lbl3, img3, "wrong magic"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := LoadIDXPair(tc.img, tc.lbl)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if ds.N != 3 || len(ds.Images) != 3*ImageSize || ds.Labels[2] != 4 {
					t.Fatalf("bad dataset: N=%d pixels=%d labels=%v", ds.N, len(ds.Images), ds.Labels)
				}
				if err := ds.Validate(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want error containing %q", err, tc.want)
			}
		})
	}
}

// writeTinyFashion writes a 4-file Fashion-MNIST look-alike (nTrain, nTest samples) to dir,
// mixing raw and gzip files.
func writeTinyFashion(t testing.TB, dir string, nTrain, nTest int) {
	t.Helper()
	lbl := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*3) % NumClasses
		}
		return b
	}
	writeFile(t, dir, TrainImagesFile+".gz", gz(t, idxImages(idxMagicImages, nTrain, 28, 28, pattern(nTrain*784))))
	writeFile(t, dir, TrainLabelsFile+".gz", gz(t, idxLabels(idxMagicLabels, nTrain, lbl(nTrain))))
	writeFile(t, dir, TestImagesFile, idxImages(idxMagicImages, nTest, 28, 28, pattern(nTest*784)))
	writeFile(t, dir, TestLabelsFile, idxLabels(idxMagicLabels, nTest, lbl(nTest)))
}

func TestLoadFashionMNIST(t *testing.T) {
	dir := t.TempDir()
	writeTinyFashion(t, dir, 12, 5)
	train, test, err := LoadFashionMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	if train.N != 12 || test.N != 5 {
		t.Fatalf("got %d/%d samples, want 12/5", train.N, test.N)
	}
	os.Remove(filepath.Join(dir, TestLabelsFile))
	_, _, err = LoadFashionMNIST(dir)
	if err == nil || !strings.Contains(err.Error(), TestLabelsFile) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("got %v, want an error naming the missing %s in %s", err, TestLabelsFile, dir)
	}
}
