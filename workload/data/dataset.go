package data

import (
	"fmt"
	"os"
	"path/filepath"
)

// Shape of one Fashion-MNIST image: 28×28 = 784 pixels.
const (
	ImageRows = 28
	ImageCols = 28
	ImageSize = ImageRows * ImageCols
)

// Dataset is a labelled image set held in memory. Images are N×ImageSize float32 pixels in
// [0, 1] (stored byte / 255), Labels are class indices 0..NumClasses-1.
type Dataset struct {
	Images []float32
	Labels []uint8
	N      int
}

// Image returns the pixels of sample i (a view, not a copy).
func (d *Dataset) Image(i int) []float32 {
	return d.Images[i*ImageSize : (i+1)*ImageSize]
}

// Validate checks that the slices agree with N and that every label is a class index.
func (d *Dataset) Validate() error {
	if d == nil {
		return fmt.Errorf("data: nil dataset")
	}
	if d.N < 0 || len(d.Labels) != d.N || len(d.Images) != d.N*ImageSize {
		return fmt.Errorf("data: dataset has N=%d but %d labels and %d pixels (want %d)", d.N, len(d.Labels), len(d.Images), d.N*ImageSize)
	}
	for i, l := range d.Labels {
		if int(l) >= NumClasses {
			return fmt.Errorf("data: label %d of sample %d out of range 0..%d", l, i, NumClasses-1)
		}
	}
	return nil
}

// LoadIDXPair reads an image file and its label file (each raw or gzip) into a Dataset. Images
// must be 28×28; a different image and label count is an error ("mislabeled").
func LoadIDXPair(imagesPath, labelsPath string) (*Dataset, error) {
	img, err := ReadIDXImages(imagesPath)
	if err != nil {
		return nil, err
	}
	if img.Rows != ImageRows || img.Cols != ImageCols {
		return nil, fmt.Errorf("idx: %s: wrong dimensions: images are %d×%d, want %d×%d", imagesPath, img.Rows, img.Cols, ImageRows, ImageCols)
	}
	labels, err := ReadIDXLabels(labelsPath)
	if err != nil {
		return nil, err
	}
	if len(labels) != img.N {
		return nil, fmt.Errorf("data: mislabeled: %s holds %d images but %s holds %d labels", imagesPath, img.N, labelsPath, len(labels))
	}
	return &Dataset{Images: img.Pixels, Labels: labels, N: img.N}, nil
}

// FashionMNIST file base names (without ".gz"), as published by Zalando Research and installed
// by Debian's dataset-fashion-mnist package.
const (
	TrainImagesFile = "train-images-idx3-ubyte"
	TrainLabelsFile = "train-labels-idx1-ubyte"
	TestImagesFile  = "t10k-images-idx3-ubyte"
	TestLabelsFile  = "t10k-labels-idx1-ubyte"
)

// Sample counts of the real data set. LoadFashionMNIST trusts the files' headers and does not
// enforce these, so tiny look-alike fixtures load too.
const (
	FashionTrainN = 60000
	FashionTestN  = 10000
)

// findFile returns dir/base.gz or dir/base, whichever exists (gzip preferred, as shipped).
func findFile(dir, base string) (string, bool) {
	for _, name := range []string{base + ".gz", base} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, true
		}
	}
	return "", false
}

// HasFashionMNIST reports whether dir holds all four Fashion-MNIST files (raw or .gz), and if
// not, which are missing.
func HasFashionMNIST(dir string) (missing []string) {
	for _, base := range []string{TrainImagesFile, TrainLabelsFile, TestImagesFile, TestLabelsFile} {
		if _, ok := findFile(dir, base); !ok {
			missing = append(missing, base+"[.gz]")
		}
	}
	return missing
}

// LoadFashionMNIST loads the training and test sets from dir, which holds the four IDX files
// raw or gzip-compressed (the layout of /usr/share/datasets/fashion-mnist).
func LoadFashionMNIST(dir string) (train, test *Dataset, err error) {
	if missing := HasFashionMNIST(dir); len(missing) > 0 {
		return nil, nil, fmt.Errorf("data: %s does not hold Fashion-MNIST: missing %v", dir, missing)
	}
	path := func(base string) string { p, _ := findFile(dir, base); return p }
	train, err = LoadIDXPair(path(TrainImagesFile), path(TrainLabelsFile))
	if err != nil {
		return nil, nil, err
	}
	test, err = LoadIDXPair(path(TestImagesFile), path(TestLabelsFile))
	if err != nil {
		return nil, nil, err
	}
	return train, test, nil
}
