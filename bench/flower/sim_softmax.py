"""The workload of bench/sim_throughput.sh in numpy, shared by its Flower side and its floor.

Softmax regression (784 -> 10 with bias) on Fashion-MNIST, trained as `fl sim --model softmax`
trains it (client_sdk/ml/builtin_trainer.cc): weights and bias start at zero; each local epoch
visits the site's examples in a fresh random order, in batches of `batch_size` (the last one
shorter); a step is w -= lr * grad of the mean cross-entropy over the batch (plain SGD, no
momentum or weight decay). Everything is float32, pixels are byte / 255 as our IDX loader makes
them. The IID split is ours: a seeded permutation of the 60,000 training examples cut into
`num_clients` consecutive parts (the first 60000 % num_clients one larger, as numpy.array_split),
each cut to at most `examples_per_client`. The permutation comes from numpy's generator, not
from our mt19937_64, so the sites hold other examples than ours: the same distribution, not the
same draw.
"""

import gzip
import os
import sys

import numpy as np

NUM_FEATURES = 784
NUM_CLASSES = 10


def add_workload_args(ap):
    """The workload's flags, the same for every side (and as `fl sim` names them)."""
    ap.add_argument("--dataset-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--examples-per-client", type=int, default=60)
    ap.add_argument("--sample-fraction", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--local-epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)


def load_idx(images_path, labels_path):
    """(images uint8 [n, 784], labels int64 [n]) from a pair of IDX files, gzipped or not."""

    def read(path):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            return f.read()

    images = read(images_path)
    labels = read(labels_path)
    n = int.from_bytes(images[4:8], "big")
    rows, cols = int.from_bytes(images[8:12], "big"), int.from_bytes(images[12:16], "big")
    x = np.frombuffer(images, dtype=np.uint8, offset=16).reshape(n, rows * cols)
    y = np.frombuffer(labels, dtype=np.uint8, offset=8).astype(np.int64)
    if len(y) != n or rows * cols != NUM_FEATURES:
        raise ValueError(f"{images_path}, {labels_path}: {n} images of {rows}x{cols}, "
                         f"{len(y)} labels")
    return x, y


def load_split(dataset_dir, split):
    """The training ("train") or test ("t10k") set as uint8 images and labels."""
    return load_idx(os.path.join(dataset_dir, f"{split}-images-idx3-ubyte.gz"),
                    os.path.join(dataset_dir, f"{split}-labels-idx1-ubyte.gz"))


def to_float(images):
    """Pixels as our loader gives them: float32 byte / 255."""
    return images.astype(np.float32) / np.float32(255.0)


def iid_parts(num_examples, num_clients, examples_per_client, seed):
    """Each client's example indices: a seeded permutation split as numpy.array_split, cut."""
    perm = np.random.default_rng(seed).permutation(num_examples)
    parts = np.array_split(perm, num_clients)
    if examples_per_client > 0:
        parts = [p[:examples_per_client] for p in parts]
    return parts


def initial_model():
    """Zero weights [784, 10] and bias [10], as fl sim starts softmax regression."""
    return (np.zeros((NUM_FEATURES, NUM_CLASSES), dtype=np.float32),
            np.zeros(NUM_CLASSES, dtype=np.float32))


def train(w, b, x, y, epochs, batch_size, lr, rng):
    """Local SGD on (x, y) from (w, b), which are left unchanged; returns (w, b, mean loss of the
    last epoch)."""
    w = w.copy()
    b = b.copy()
    lr = np.float32(lr)
    n = len(y)
    loss = 0.0
    for _ in range(epochs):
        order = rng.permutation(n)
        loss = 0.0
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            xb, yb = x[idx], y[idx]
            rows = len(idx)
            logits = xb @ w + b
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            at = np.arange(rows)
            loss -= float(np.log(np.maximum(p[at, yb], 1e-30)).sum())
            p[at, yb] -= 1.0
            p *= np.float32(1.0 / rows)  # gradient of the batch's mean loss wrt the logits
            w -= lr * (xb.T @ p)
            b -= lr * p.sum(axis=0)
    return w, b, loss / n


def evaluate(w, b, x, y):
    """(accuracy, mean cross-entropy) of the model on (x, y)."""
    logits = x @ w + b
    correct = int((logits.argmax(axis=1) == y).sum())
    logits -= logits.max(axis=1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    loss = -float(log_p[np.arange(len(y)), y].mean())
    return correct / len(y), loss


_site_cache = {}


def cached_site_data(dataset_dir, num_clients, examples_per_client, seed, site):
    """One site's (float32 x, labels) for a process that serves many sites (a Flower ClientApp
    actor): the training set and the split are loaded once per process and kept here, in an
    imported module, whose state lasts as long as the process (a function that Ray ships by value
    gets fresh globals whenever it is unpickled)."""
    key = (dataset_dir, num_clients, examples_per_client, seed)
    if key not in _site_cache:
        images, labels = load_split(dataset_dir, "train")
        _site_cache.clear()
        _site_cache[key] = (images, labels,
                            iid_parts(len(labels), num_clients, examples_per_client, seed))
        print(f"process {os.getpid()} loaded the training set; BLAS: {blas_info()}",
              file=sys.stderr, flush=True)
    images, labels, parts = _site_cache[key]
    part = parts[site]
    return to_float(images[part]), labels[part]


def site_rng(seed, site, server_round):
    """The shuffling generator of one site in one round (ours seeds from the same three)."""
    return np.random.default_rng([seed, site, server_round])


def blas_info():
    """Which BLAS numpy runs here and with how many threads, in one line."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed: BLAS kernel unknown"
    infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    if not infos:
        return "no BLAS thread pool found"
    return "; ".join(f"{i.get('internal_api')} {i.get('version')} kernel "
                     f"{i.get('architecture')} threads {i.get('num_threads')}" for i in infos)
