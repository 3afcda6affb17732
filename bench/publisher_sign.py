#!/usr/bin/python3
"""bench/publisher_sign.py: the Python package's Publisher, unsigned or signed.

    publisher_sign.py ENDPOINT BYTES RUNS [SIGN_KEY]

Publishes a model of BYTES (8 float32 tensors) RUNS times through one
Publisher to the hub at ENDPOINT (into its slots when it is on this host),
with no watcher and no wait, and prints each publish's seconds, one a line
(bench/run's measure takes them). With SIGN_KEY, every publish is signed
(wsync_signseq_next, then wsync_sign_trees: a SHA-256 pass over the tensors,
the counter beside the key written and synced). The first 3 publishes warm
up (a recycling hub's spare files, the kept slot mappings) and are not printed.
The wsync programs and libwsync are found on PATH, the package in python/.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import wsync  # noqa: E402

WARM = 3


def main() -> int:
    if len(sys.argv) not in (4, 5):
        print("usage: publisher_sign.py ENDPOINT BYTES RUNS [SIGN_KEY]", file=sys.stderr)
        return 64
    endpoint, size, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sign_key = sys.argv[4] if len(sys.argv) == 5 else None
    arrays = {f"t{i}": np.full(size // 4 // 8, i, np.float32) for i in range(8)}
    model = "benchpy-signed" if sign_key else "benchpy"
    with wsync.Publisher(model, endpoint=endpoint, sign_key=sign_key) as pub:
        for r in range(WARM + runs):
            arrays["t0"][0] = r
            t0 = time.perf_counter()
            pub.publish(arrays)
            took = time.perf_counter() - t0
            if r >= WARM:
                print(f"{took:.9f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
