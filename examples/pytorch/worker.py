#!/usr/bin/python3
"""worker.py - an inference worker: loads every update of the policy into its own module.

usage: worker.py --id ID [--dir DIR] [--ref DIR] [--model ID]

It runs wsync-watch with a hook that hands each new version to this process
through two FIFOs and exits 0 only once the weights are loaded into the
worker's torch.nn.Module, so the hub's acknowledgement means "running these
weights". It checks every tensor equals the trainer's copy (REF/step-S.pt),
prints "ID VERSION STEP ok" per update. It runs until SIGTERM or SIGINT (exit
0), a mismatch (exit 1) or the end of wsync-watch (its exit status).
"""
import argparse
import os
import select
import signal
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import wsync  # noqa: E402
from trainer import make_policy  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--id", required=True)
    ap.add_argument("--dir", default=".")
    ap.add_argument("--ref", default="ref")
    ap.add_argument("--model", default="policy")
    args = ap.parse_args()
    path = os.path.join(args.dir, f"{args.id}.wsync")
    req, ack = os.path.join(args.dir, f"{args.id}.req"), os.path.join(args.dir, f"{args.id}.ack")
    for fifo in (req, ack):
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
    # Open for reading and writing: the open does not wait for the hook, and
    # a read waits for a line instead of seeing end of file between hooks.
    req_fd = os.open(req, os.O_RDWR)
    hook = f'echo "$WSYNC_VERSION" >{req} && read r <{ack} && [ "$r" = ok ]'
    watch = subprocess.Popen(["wsync-watch", "--id", args.id, "-m", args.model, "-o", path,
                              "-x", hook, "--exec-timeout", "60"], stdout=subprocess.DEVNULL)
    policy = make_policy()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            if not select.select([req_fd], [], [], 1.0)[0]:
                if watch.poll() is not None:
                    return watch.returncode
                continue
            version = int(os.read(req_fd, 64))
            arrays, meta = wsync.read(path)
            policy.load_state_dict({k: torch.from_numpy(a.copy()) for k, a in arrays.items()})
            ref = torch.load(os.path.join(args.ref, f"step-{meta['step']}.pt"))
            mine = policy.state_dict()
            ok = mine.keys() == ref.keys() and all(torch.equal(mine[k], ref[k]) for k in ref)
            with open(ack, "w") as f:
                f.write("ok\n" if ok else "mismatch\n")
            print(f"{args.id} {version} {meta['step']} {'ok' if ok else 'MISMATCH'}", flush=True)
            if not ok:
                return 1
    except KeyboardInterrupt:
        return 0
    finally:
        watch.terminate()
        watch.wait()


if __name__ == "__main__":
    sys.exit(main())
