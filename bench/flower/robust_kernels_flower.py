"""Flower 1.42's robust aggregation functions on the updates robust_kernel_bench used.

  robust_kernels_flower.py DATA SITES PARAMS OURS_DIR [REPEATS]

DATA holds SITES x PARAMS float32 values (row-major); each row becomes one client's model of a
single array (the most favourable layout for numpy: no per-layer loop). Times
flwr.server.strategy.aggregate's aggregate_median, aggregate_trimmed_avg (0.2),
aggregate_krum (f = 2, to_keep 0) and aggregate_bulyan (f = 1, Krum), each REPEATS times, and
compares each result with OURS_DIR/<kernel>.f32 (what our kernel computed on the same data).
Prints one RESULT line per kernel: the median seconds, the largest absolute difference and the
number of parameters that differ by more than 1e-5.
"""

import statistics
import sys
import time

import numpy as np
from flwr.server.strategy.aggregate import (
    aggregate_bulyan,
    aggregate_krum,
    aggregate_median,
    aggregate_trimmed_avg,
)


def main() -> None:
    data, sites, params, ours = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    rows = np.fromfile(data, dtype=np.float32).reshape(sites, params)
    results = [([rows[i].copy()], 1) for i in range(sites)]
    kernels = {
        "median": lambda: aggregate_median(results),
        "trimmed_avg": lambda: aggregate_trimmed_avg(results, 0.2),
        "krum": lambda: aggregate_krum(results, 2, 0),
        # aggregate_bulyan pops from the list it is given.
        "bulyan": lambda: aggregate_bulyan(list(results), 1, aggregate_krum, to_keep=0),
    }
    for name, run in kernels.items():
        seconds = []
        out = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = run()
            seconds.append(time.perf_counter() - t0)
        theirs = np.asarray(out[0], dtype=np.float64).ravel()
        mine = np.fromfile(f"{ours}/{name}.f32", dtype=np.float32).astype(np.float64)
        gap = np.abs(theirs - mine)
        diff = float(np.max(gap))
        # Bulyan's second step breaks near-ties (two values about as far from the median) by a
        # float32 median in numpy, by a float64 one here: count the coordinates that differ.
        differ = int(np.count_nonzero(gap > 1e-5))
        print(
            f"RESULT kernel={name} seconds={statistics.median(seconds):.6f} "
            f"max_abs_diff={diff:.3g} differing={differ}",
            flush=True,
        )


if __name__ == "__main__":
    main()
