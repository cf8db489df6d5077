// Package data loads the training data a worker needs and cuts it into per-rank shards.
//
// It holds:
//   - an IDX reader (raw or gzip, detected by the gzip magic) for unsigned-byte image files
//     (magic 0x00000803) and label files (magic 0x00000801). Pixels become float32 in [0, 1]
//     (byte / 255, no mean/std normalization). Every malformed file is an error naming it:
//     wrong magic, wrong dimensions, truncated file, trailing garbage, a label outside 0..9,
//     and an image/label count mismatch ("mislabeled").
//   - Fashion-MNIST discovery (Locator), in this order: --data DIR, $HETSYNC_DATA,
//     /usr/share/datasets/fashion-mnist (Debian package dataset-fashion-mnist, four .gz files:
//     train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
//     t10k-labels-idx1-ubyte.gz), then os.UserCacheDir()/hetsync/fashion-mnist. An explicit
//     --data or $HETSYNC_DATA that lacks the files is an error, not a fall-through. When no
//     directory has the data, the files are downloaded from the canonical locations into the
//     cache directory, with a progress bar on stderr, and each is accepted only when the
//     SHA-256 of its decompressed content matches (mirrors recompress, so the .gz bytes differ).
//   - the iid / by-class shard rules of docs/algorithms.md#data-shards and a deterministic batch
//     iterator per shard: the order of epoch e depends only on (seed, rank, e).
//
// It must never: reach the network unless no local copy exists and downloading is enabled,
// write outside the cache directory, keep global mutable state, panic on a malformed file, or
// allocate per batch in steady state.
package data
