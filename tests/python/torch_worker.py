#!/usr/bin/python3
"""A worker for the tests: follows "policy" with wsync.watch, loads each version
into its own bf16 module and acks; prints "VERSION DIGEST" once acked, DIGEST
being the sha256 of the module's state_dict. With --fail-at V, its load of
version V raises, and it reports that failure instead.

usage: torch_worker.py ENDPOINT ID PATH [--fail-at V]
"""
import hashlib
import sys

import torch

import wsync


def make_module():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 4)).to(torch.bfloat16)


def digest(state_dict):
    h = hashlib.sha256()
    for k in sorted(state_dict):
        h.update(k.encode())
        h.update(state_dict[k].contiguous().view(torch.int16).numpy().tobytes())
    return h.hexdigest()


def main(argv):
    endpoint, worker, path = argv[1:4]
    fail_at = int(argv[5]) if len(argv) > 5 and argv[4] == "--fail-at" else 0
    module = make_module()
    with wsync.watch("policy", path, worker=worker, endpoint=endpoint,
                     framework="torch", ack_timeout=30) as updates:
        for update in updates:
            try:
                if update.version == fail_at:
                    module.load_state_dict({"no such": update.tensors["0.weight"]})
                module.load_state_dict(update.tensors)
            except RuntimeError as e:
                update.fail(f"load_state_dict: {str(e).splitlines()[0]}")
                continue
            update.ack()
            print(update.version, digest(module.state_dict()), flush=True)


if __name__ == "__main__":
    main(sys.argv)
