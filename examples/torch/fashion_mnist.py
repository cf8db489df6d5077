"""Fashion-MNIST for the torch examples: Debian's dataset-fashion-mnist (scripts/setup-data.sh
installs it), read from its IDX files with numpy alone."""

import gzip
import os

import numpy as np


def data_dir(flag):
    for d in (flag, os.environ.get("HETSYNC_DATA"), "/usr/share/datasets/fashion-mnist"):
        if d and os.path.exists(os.path.join(d, "train-images-idx3-ubyte.gz")):
            return d
    raise SystemExit("Fashion-MNIST not found: install Debian's dataset-fashion-mnist (scripts/setup-data.sh) "
                     "or pass --data DIR holding the four IDX .gz files")


def idx(path):
    """An IDX file (gzip-compressed) as a numpy array."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
