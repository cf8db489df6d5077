package data

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// Places searched for Fashion-MNIST, in this order (see Locator.Find).
const (
	// EnvDataDir names a directory holding the four files.
	EnvDataDir = "HETSYNC_DATA"
	// DebianDir is where Debian's dataset-fashion-mnist package installs the four .gz files.
	DebianDir = "/usr/share/datasets/fashion-mnist"
	// DebianPackage is the Debian package that ships the data set.
	DebianPackage = "dataset-fashion-mnist"
)

// RemoteFile is one file of the data set to download: its name on the server and the SHA-256
// of its decompressed IDX content. The content hash, not the hash of the .gz, is checked
// because mirrors recompress: Debian's .gz files differ from Zalando's byte for byte
// (gzip MD5 cf8536b0… against the upstream README's 8d4fb7e6…) while the IDX bytes inside are
// identical.
type RemoteFile struct {
	Name          string // e.g. "train-images-idx3-ubyte.gz"
	ContentSHA256 string // hex SHA-256 of the gunzipped bytes
}

// FashionMNISTFiles returns the four files with their content checksums (computed from the
// Debian package and matching the published upstream files, whose gzip MD5s are in the
// upstream README: 8d4fb7e6c68d591d4c3dfef9ec88bf0d, 25c81989df183df01b3e8a0aad5dffbe,
// bef4ecab320f06d8554ea6380940ec79, bb300cfdad3c16e7a12a480ee83cd310).
func FashionMNISTFiles() []RemoteFile {
	return []RemoteFile{
		{TrainImagesFile + ".gz", "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"},
		{TrainLabelsFile + ".gz", "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"},
		{TestImagesFile + ".gz", "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"},
		{TestLabelsFile + ".gz", "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"},
	}
}

// FashionMNISTMirrors returns the canonical download locations, tried in order: the
// zalandoresearch/fashion-mnist repository's data directory and its S3 mirror.
func FashionMNISTMirrors() []string {
	return []string{
		"https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
		"http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
	}
}

// Locator finds the Fashion-MNIST directory and, when allowed, downloads the data set into
// the cache directory. The zero value is not useful: start from NewLocator.
type Locator struct {
	// Flag is the --data value. When set it is the only place looked at, and a directory
	// without the files is an error.
	Flag string
	// Env is the value of $HETSYNC_DATA. When set (and Flag is not) it is likewise the only
	// place looked at.
	Env string
	// SystemDir is the Debian package's directory (DebianDir).
	SystemDir string
	// CacheDir is the per-user cache (os.UserCacheDir()/hetsync/fashion-mnist); downloads go
	// here. Empty when the user has no cache directory.
	CacheDir string
	// Download allows fetching the files into CacheDir when no directory has them.
	Download bool
	// Mirrors are base URLs (ending in "/") tried in order for each file.
	Mirrors []string
	// Files are the files to fetch with their checksums.
	Files []RemoteFile
	// Client performs the downloads; nil means http.DefaultClient.
	Client *http.Client
	// Progress receives a progress bar while downloading (usually os.Stderr); nil is silent.
	Progress io.Writer
}

// NewLocator returns the standard search order for a --data flag value, reading
// $HETSYNC_DATA and the user cache directory from the environment.
func NewLocator(flagDir string) Locator {
	cache := ""
	if d, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(d, "hetsync", "fashion-mnist")
	}
	return Locator{
		Flag:      flagDir,
		Env:       os.Getenv(EnvDataDir),
		SystemDir: DebianDir,
		CacheDir:  cache,
		Download:  true,
		Mirrors:   FashionMNISTMirrors(),
		Files:     FashionMNISTFiles(),
		Progress:  os.Stderr,
	}
}

// Validate checks the download settings.
func (l *Locator) Validate() error {
	if !l.Download {
		return nil
	}
	if len(l.Mirrors) == 0 {
		return errors.New("data: locator: download enabled but no mirror URLs")
	}
	for _, m := range l.Mirrors {
		if !strings.HasPrefix(m, "http://") && !strings.HasPrefix(m, "https://") {
			return fmt.Errorf("data: locator: mirror %q is not an http(s) URL", m)
		}
	}
	if len(l.Files) == 0 {
		return errors.New("data: locator: download enabled but no files listed")
	}
	for _, f := range l.Files {
		if f.Name == "" || strings.ContainsAny(f.Name, `/\`) {
			return fmt.Errorf("data: locator: bad file name %q", f.Name)
		}
		if b, err := hex.DecodeString(f.ContentSHA256); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("data: locator: file %s: checksum %q is not a hex SHA-256", f.Name, f.ContentSHA256)
		}
	}
	return nil
}

// NotFoundError says that no searched directory holds the data set and how to get it.
type NotFoundError struct {
	Searched []string // directories looked at, in order
	Cause    error    // the download failure, if a download was tried
}

func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "data: Fashion-MNIST not found (searched: %s)", strings.Join(e.Searched, ", "))
	if e.Cause != nil {
		fmt.Fprintf(&b, "; download failed: %v", e.Cause)
	}
	fmt.Fprintf(&b, "; install it with `apt-get install %s` (files in %s), or pass --data DIR / set $%s to a directory holding %s, %s, %s, %s (raw or .gz)",
		DebianPackage, DebianDir, EnvDataDir, TrainImagesFile, TrainLabelsFile, TestImagesFile, TestLabelsFile)
	return b.String()
}

func (e *NotFoundError) Unwrap() error { return e.Cause }

// Find returns the first directory holding all four files, without downloading. Order:
// Flag, Env, SystemDir, CacheDir. A set Flag or Env that lacks the files is an error naming it.
func (l *Locator) Find() (string, error) {
	if l.Flag != "" {
		if missing := HasFashionMNIST(l.Flag); len(missing) > 0 {
			return "", fmt.Errorf("data: --data %s: missing %v", l.Flag, missing)
		}
		return l.Flag, nil
	}
	if l.Env != "" {
		if missing := HasFashionMNIST(l.Env); len(missing) > 0 {
			return "", fmt.Errorf("data: $%s=%s: missing %v", EnvDataDir, l.Env, missing)
		}
		return l.Env, nil
	}
	var searched []string
	for _, dir := range []string{l.SystemDir, l.CacheDir} {
		if dir == "" {
			continue
		}
		searched = append(searched, dir)
		if len(HasFashionMNIST(dir)) == 0 {
			return dir, nil
		}
	}
	return "", &NotFoundError{Searched: searched}
}

// Locate is Find, then, when nothing was found and Download is set, a download into CacheDir.
func (l *Locator) Locate(ctx context.Context) (string, error) {
	if err := l.Validate(); err != nil {
		return "", err
	}
	dir, err := l.Find()
	var nf *NotFoundError
	if err == nil || !errors.As(err, &nf) || !l.Download {
		return dir, err
	}
	if l.CacheDir == "" {
		nf.Cause = errors.New("no user cache directory to download into")
		return "", nf
	}
	if err := l.fetchAll(ctx); err != nil {
		nf.Cause = err
		return "", nf
	}
	return l.CacheDir, nil
}

func (l *Locator) fetchAll(ctx context.Context) error {
	if err := os.MkdirAll(l.CacheDir, 0o755); err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	for _, f := range l.Files {
		dst := filepath.Join(l.CacheDir, f.Name)
		if ok, _ := fileHasContentSHA256(dst, f.ContentSHA256); ok {
			continue
		}
		var errs []error
		for _, m := range l.Mirrors {
			err := l.fetchOne(ctx, m+f.Name, dst, f.ContentSHA256)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	return nil
}

// fetchOne downloads url into dst via a temporary file in the same directory, checking the
// SHA-256 of the decompressed content before renaming it into place.
func (l *Locator) fetchOne(ctx context.Context, url, dst, wantSHA string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	client := l.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %s", url, resp.Status)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".part-*")
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename

	bar := newProgressBar(l.Progress, filepath.Base(dst), resp.ContentLength)
	_, err = io.Copy(tmp, io.TeeReader(resp.Body, bar))
	bar.finish(err)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: download: %w", url, err)
	}
	ok, got := fileHasContentSHA256(tmp.Name(), wantSHA)
	if !ok {
		return fmt.Errorf("%s: checksum mismatch: content SHA-256 %s, want %s", url, got, wantSHA)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	return nil
}

// fileHasContentSHA256 hashes the file's decompressed content (or raw content when it is not
// gzip) and compares it with want. got describes the hash or the reason none was computed.
func fileHasContentSHA256(path, want string) (ok bool, got string) {
	f, err := os.Open(path)
	if err != nil {
		return false, err.Error()
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == gzipMagic[0] && head[1] == gzipMagic[1] {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return false, "bad gzip: " + err.Error()
		}
		r = zr
	}
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return false, "unreadable: " + err.Error()
	}
	got = hex.EncodeToString(h.Sum(nil))
	return strings.EqualFold(got, want), got
}

// progressBar draws "name [=====>    ]  42% 11.1/26.4 MB" on one line, redrawn at most once
// per percent (or per MiB when the size is unknown), so its output does not depend on timing.
type progressBar struct {
	w        io.Writer
	name     string
	total    int64
	done     int64
	lastStep int64
}

func newProgressBar(w io.Writer, name string, total int64) *progressBar {
	return &progressBar{w: w, name: name, total: total, lastStep: -1}
}

func (p *progressBar) Write(b []byte) (int, error) {
	p.done += int64(len(b))
	if p.w == nil {
		return len(b), nil
	}
	var step int64
	if p.total > 0 {
		step = p.done * 100 / p.total
	} else {
		step = p.done >> 20
	}
	if step != p.lastStep {
		p.lastStep = step
		p.draw()
	}
	return len(b), nil
}

func (p *progressBar) draw() {
	const width = 30
	if p.total > 0 {
		pct := p.done * 100 / p.total
		if pct > 100 {
			pct = 100
		}
		fill := int(pct * width / 100)
		bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
		if fill > 0 && fill < width {
			bar = bar[:fill-1] + ">" + bar[fill:]
		}
		fmt.Fprintf(p.w, "\r%s [%s] %3d%% %.1f/%.1f MB", p.name, bar, pct, float64(p.done)/1e6, float64(p.total)/1e6)
		return
	}
	fmt.Fprintf(p.w, "\r%s %.1f MB", p.name, float64(p.done)/1e6)
}

func (p *progressBar) finish(err error) {
	if p.w == nil {
		return
	}
	p.draw()
	if err != nil {
		fmt.Fprintf(p.w, " failed: %v\n", err)
		return
	}
	fmt.Fprintln(p.w, " done")
}
