package data

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

func TestLocatorFindOrder(t *testing.T) {
	full := func() string { d := t.TempDir(); writeTinyFashion(t, d, 4, 2); return d }
	empty := func() string { return t.TempDir() }
	flagDir, envDir, sysDir, cacheDir, emptyDir := full(), full(), full(), full(), empty()
	cases := []struct {
		name    string
		loc     Locator
		want    string // directory found, or "" for an error
		wantErr []string
	}{
		{"flag wins", Locator{Flag: flagDir, Env: envDir, SystemDir: sysDir, CacheDir: cacheDir}, flagDir, nil},
		{"env next", Locator{Env: envDir, SystemDir: sysDir, CacheDir: cacheDir}, envDir, nil},
		{"system next", Locator{SystemDir: sysDir, CacheDir: cacheDir}, sysDir, nil},
		{"cache last", Locator{SystemDir: emptyDir, CacheDir: cacheDir}, cacheDir, nil},
		{"explicit flag without files", Locator{Flag: emptyDir, SystemDir: sysDir}, "", []string{"--data " + emptyDir, TrainImagesFile}},
		{"explicit env without files", Locator{Env: emptyDir, SystemDir: sysDir}, "", []string{"$HETSYNC_DATA=" + emptyDir}},
		{"nowhere", Locator{SystemDir: emptyDir, CacheDir: filepath.Join(emptyDir, "cache")}, "",
			[]string{"apt-get install dataset-fashion-mnist", emptyDir, filepath.Join(emptyDir, "cache")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.loc.Find()
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("Find() = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Find() = %q, want an error", got)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// tinyMirror serves four small gzip files under /good/ and nothing under /missing/.
type tinyMirror struct {
	files    map[string][]byte // name → .gz bytes
	contents map[string][]byte // name → decompressed bytes
	hits     atomic.Int64
}

func newTinyMirror(t *testing.T) (*tinyMirror, *httptest.Server) {
	m := &tinyMirror{files: map[string][]byte{}, contents: map[string][]byte{}}
	raw := map[string][]byte{
		TrainImagesFile: idxImages(idxMagicImages, 6, 28, 28, pattern(6*784)),
		TrainLabelsFile: idxLabels(idxMagicLabels, 6, []byte{0, 1, 2, 3, 4, 5}),
		TestImagesFile:  idxImages(idxMagicImages, 2, 28, 28, pattern(2*784)),
		TestLabelsFile:  idxLabels(idxMagicLabels, 2, []byte{9, 8}),
	}
	for base, body := range raw {
		m.files[base+".gz"] = gz(t, body)
		m.contents[base+".gz"] = body
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.hits.Add(1)
		name := strings.TrimPrefix(r.URL.Path, "/good/")
		body, ok := m.files[name]
		if !ok || !strings.HasPrefix(r.URL.Path, "/good/") {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return m, srv
}

func (m *tinyMirror) remoteFiles() []RemoteFile {
	var out []RemoteFile
	for _, f := range FashionMNISTFiles() {
		out = append(out, RemoteFile{Name: f.Name, ContentSHA256: sha256Hex(m.contents[f.Name])})
	}
	return out
}

func TestLocatorDownload(t *testing.T) {
	m, srv := newTinyMirror(t)
	cache := filepath.Join(t.TempDir(), "hetsync", "fashion-mnist")
	var progress bytes.Buffer
	loc := Locator{
		SystemDir: t.TempDir(),
		CacheDir:  cache,
		Download:  true,
		Mirrors:   []string{srv.URL + "/missing/", srv.URL + "/good/"}, // first mirror 404s
		Files:     m.remoteFiles(),
		Client:    srv.Client(),
		Progress:  &progress,
	}
	dir, err := loc.Locate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if dir != cache {
		t.Fatalf("Locate() = %s, want the cache %s", dir, cache)
	}
	train, test, err := LoadFashionMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	if train.N != 6 || test.N != 2 || test.Labels[0] != 9 {
		t.Fatalf("downloaded data: train N=%d test N=%d labels %v", train.N, test.N, test.Labels)
	}
	for _, f := range loc.Files {
		if !strings.Contains(progress.String(), f.Name) {
			t.Errorf("progress output lacks %s: %q", f.Name, progress.String())
		}
	}
	if !strings.Contains(progress.String(), "100%") || !strings.Contains(progress.String(), "done") {
		t.Errorf("progress output lacks 100%%/done: %q", progress.String())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(cache, "*.part-*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
	// A second Locate finds the cache and does not touch the network.
	before := m.hits.Load()
	if dir, err := loc.Locate(context.Background()); err != nil || dir != cache {
		t.Fatalf("second Locate() = %s, %v", dir, err)
	}
	if after := m.hits.Load(); after != before {
		t.Fatalf("second Locate made %d requests, want 0", after-before)
	}
}

func TestLocatorDownloadFailures(t *testing.T) {
	m, srv := newTinyMirror(t)
	badSums := m.remoteFiles()
	badSums[2].ContentSHA256 = strings.Repeat("ab", 32)
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close() // nothing listens there any more: an "offline" mirror
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name    string
		ctx     context.Context
		mirrors []string
		files   []RemoteFile
		want    []string
	}{
		{"checksum mismatch", context.Background(), []string{srv.URL + "/good/"}, badSums,
			[]string{"checksum mismatch", TestImagesFile, "want " + strings.Repeat("ab", 32)}},
		{"offline", context.Background(), []string{closedURL + "/"}, m.remoteFiles(),
			[]string{"download failed", "apt-get install dataset-fashion-mnist", closedURL}},
		{"not found anywhere", context.Background(), []string{srv.URL + "/a/", srv.URL + "/b/"}, m.remoteFiles(),
			[]string{"404", srv.URL + "/a/", srv.URL + "/b/"}},
		{"canceled", canceled, []string{srv.URL + "/good/"}, m.remoteFiles(), []string{"context canceled"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "cache")
			sys := t.TempDir()
			loc := Locator{SystemDir: sys, CacheDir: cache, Download: true, Mirrors: tc.mirrors, Files: tc.files, Client: srv.Client()}
			_, err := loc.Locate(tc.ctx)
			var nf *NotFoundError
			if !errors.As(err, &nf) {
				t.Fatalf("got %v, want a *NotFoundError", err)
			}
			for _, w := range append(tc.want, sys, cache) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if missing := HasFashionMNIST(cache); len(missing) == 0 {
				t.Errorf("cache %s holds a complete data set after a failed download", cache)
			}
			if bad, _ := os.Stat(filepath.Join(cache, TestImagesFile+".gz")); tc.name == "checksum mismatch" && bad != nil {
				t.Errorf("file with a bad checksum was kept in the cache")
			}
			if leftovers, _ := filepath.Glob(filepath.Join(cache, "*.part-*")); len(leftovers) > 0 {
				t.Errorf("temporary files left: %v", leftovers)
			}
		})
	}
}

func TestLocatorValidate(t *testing.T) {
	good := FashionMNISTFiles()
	cases := []struct {
		name string
		loc  Locator
		want string
	}{
		{"download off needs nothing", Locator{}, ""},
		{"defaults", Locator{Download: true, Mirrors: FashionMNISTMirrors(), Files: good}, ""},
		{"no mirrors", Locator{Download: true, Files: good}, "no mirror"},
		{"ftp mirror", Locator{Download: true, Mirrors: []string{"ftp://x/"}, Files: good}, "not an http(s) URL"},
		{"no files", Locator{Download: true, Mirrors: FashionMNISTMirrors()}, "no files"},
		{"bad checksum", Locator{Download: true, Mirrors: FashionMNISTMirrors(), Files: []RemoteFile{{"a.gz", "xyz"}}}, "not a hex SHA-256"},
		{"path in name", Locator{Download: true, Mirrors: FashionMNISTMirrors(), Files: []RemoteFile{{"../a.gz", good[0].ContentSHA256}}}, "bad file name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.loc.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}
