package metrics

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ReplaceFile replaces path atomically with what write writes: a temporary file beside it,
// synced, then renamed over it, so that a reader (or a crash) sees the old file or the new
// one, never a part. The new file has the mode of the run directory's other files. Every file
// of a run directory that is rewritten whole (summary.json, a rewound or gathered records file,
// a checkpoint) goes through it.
func ReplaceFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	bw := bufio.NewWriter(tmp)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Chmod(0o644) // CreateTemp made it 0600
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// ReadFileLimit reads the file at path, or fails, naming it and the limit, when it holds more
// than limit bytes: a user-given path may be a device, a pipe or a link to one (/dev/zero,
// /dev/stdin) that never ends, which os.ReadFile would read until memory runs out.
func ReadFileLimit(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes, the most read from such a file (is it a device or an endless pipe?)", path, limit)
	}
	return b, nil
}
