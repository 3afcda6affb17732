#!/usr/bin/python3
"""worker.py - an inference worker: loads every update of the policy into its own module.

usage: worker.py --id ID [--dir DIR] [--ref DIR] [--model ID]

It follows the policy with wsync.watch (wsync-watch --ack stdin underneath):
each version comes as torch tensors over the mapped file, is loaded into the
worker's torch.nn.Module, and is acknowledged only then, so the hub's
acknowledgement means "running these weights". It checks every tensor equals
the trainer's copy (REF/step-S.pt) and prints "ID VERSION STEP ok" per update;
a load that raises or a mismatch is reported to the hub as a failure, with
its reason. It runs until SIGTERM or SIGINT (exit 0), a mismatch (exit 1) or
the end of wsync-watch (its exit status).
"""
import argparse
import os
import signal
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import wsync  # noqa: E402  (installed by make install; from the source tree otherwise)
from trainer import make_policy  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--id", required=True)
    ap.add_argument("--dir", default=".")
    ap.add_argument("--ref", default="ref")
    ap.add_argument("--model", default="policy")
    args = ap.parse_args()
    policy = make_policy()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with wsync.watch(args.model, os.path.join(args.dir, f"{args.id}.wsync"),
                         worker=args.id, framework="torch") as updates:
            for update in updates:
                try:
                    policy.load_state_dict(update.tensors)
                except RuntimeError as e:
                    # The whole reason, on one line: which keys or shapes differ.
                    update.fail("load_state_dict: " + " ".join(str(e).split()))
                    continue
                step = update.meta["step"]
                ref = torch.load(os.path.join(args.ref, f"step-{step}.pt"))
                mine = policy.state_dict()
                ok = mine.keys() == ref.keys() and all(torch.equal(mine[k], ref[k]) for k in ref)
                if ok:
                    update.ack()
                else:
                    update.fail(f"weights differ from the trainer's step {step}")
                print(f"{args.id} {update.version} {step} {'ok' if ok else 'MISMATCH'}",
                      flush=True)
                if not ok:
                    return 1
    except KeyboardInterrupt:
        return 0
    except wsync.WsyncError as e:
        print(f"worker {args.id}: {e}", file=sys.stderr)
        return e.status
    return 0


if __name__ == "__main__":
    sys.exit(main())
