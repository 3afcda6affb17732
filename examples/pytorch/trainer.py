#!/usr/bin/python3
"""trainer.py - trains a small policy and publishes it with wsync.Publisher every K steps.

usage: trainer.py [--steps N] [--every K] [--workers W] [--ref DIR] [--model ID]

Every K steps it publishes the policy's state_dict as it is (the package
python/wsync: one wsync-push --batch for the trainer's life, the tensors
copied and hashed in one pass into the hub's store on its host), keeps its
own copy in DIR/step-S.pt for the workers to compare against, and returns once
W workers have applied (loaded) the version. Prints "version V step S" per
publish on stdout, the loss on stderr.
"""
import argparse
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import wsync  # noqa: E402  (installed by make install; from the source tree otherwise)


def make_policy():
    """The policy the trainer trains and every worker runs: 8 observations, 4 actions."""
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--ref", default="ref")
    ap.add_argument("--model", default="policy")
    args = ap.parse_args()
    os.makedirs(args.ref, exist_ok=True)

    torch.manual_seed(0)
    policy, teacher = make_policy(), nn.Linear(8, 4)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    with wsync.Publisher(args.model) as pub:
        for step in range(1, args.steps + 1):
            obs = torch.randn(64, 8)
            with torch.no_grad():
                actions = teacher(obs).argmax(dim=1)
            loss = nn.functional.cross_entropy(policy(obs), actions)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % args.every != 0 and step != args.steps:
                continue
            torch.save(policy.state_dict(), os.path.join(args.ref, f"step-{step}.pt"))
            version = pub.publish(policy.state_dict(), meta={"step": step},
                                  wait=args.workers, timeout=60)
            print(f"version {version} step {step}", flush=True)
            print(f"trainer: step {step} loss {loss.item():.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
