#!/usr/bin/python3
"""torch_sync.py - wsync side by side with PyTorch's own ways of syncing weights.

For each model size and number N of worker processes, the median and p90 time
from "the trainer starts an update" until "all N workers hold it" (each worker
signals back that it has the new version's weights in its own hands):

  queues   torch.multiprocessing: the trainer puts its state dict into one
           queue per worker; each worker copies it into its own parameters
           and acks on a pipe.
  shared   one shared-memory buffer overwritten in place (tears): the trainer
           copies its weights into it, bumps a shared version counter and
           wakes each worker with a pipe message; workers read in place, ack.
  gloo     torch.distributed broadcast over N+1 ranks on 127.0.0.1; done when
           every worker returned from it and acked.
  memcpy   the limit: numpy.copyto of the model into pages that already exist.
  wsync    examples/python/wsync.py's Publisher into a hub (wsync-serve
           --keep 1, store on tmpfs) with N `wsync-watch --transfer link`
           workers: publish(model, arrays, wait="all") until it returns.

Every method moves the same state dict: 4 float32 tensors summing to the size.
Called by bench/run (`make bench`):

  torch_sync.py --bin DIR [--quick] [--rows FILE] [--section FILE]
                [--sizes 256k,64m,1g] [--counts 1,4,8] [--methods LIST]

--rows gets rows of bench/run's table (wsync beside its baselines), --section
a markdown section with the whole side-by-side table; progress goes to stderr.
Without python3-torch the torch columns are skipped (said so) and wsync and
the memcpy limit are still measured. Exit status: 0 (a failed configuration
is a "failed" cell, not an exit), 64 usage, 66 programs missing.
"""
import argparse
import gc
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as tmp
except ImportError:
    torch = None

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SIZES = {"256k": 256 * KIB, "64m": 64 * MIB, "1g": GIB}
LABELS = {256 * KIB: "256 KiB", 64 * MIB: "64 MiB", GIB: "1 GiB"}
NPARTS = 4          # tensors in the state dict
WAIT_S = 60         # bound on any single wait for a worker
TORCH_METHODS = ("queues", "shared", "gloo")
NAMES = {"wsync": "wsync", "queues": "torch queues", "shared": "shared buffer",
         "gloo": "gloo broadcast", "memcpy": "memcpy limit"}


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def human(s):
    """Seconds as bench/run prints them."""
    if s < 1e-3:
        return "%.0f us" % (s * 1e6)
    if s < 1:
        return "%.1f ms" % (s * 1e3)
    return "%.2f s" % s


def stats(times):
    """(median, p90 by nearest rank), as bench/run computes them."""
    t = sorted(times)
    n = len(t)
    med = t[n // 2] if n % 2 else (t[n // 2 - 1] + t[n // 2]) / 2
    r = -(-9 * n // 10)
    return med, t[r - 1]


def shapes_of(size):
    """The split of size bytes into NPARTS float32 tensors of 256 columns (or fewer)."""
    elems = size // 4 // NPARTS
    cols = min(256, elems)
    return [(elems // cols, cols)] * NPARTS


def plan(size, quick):
    """(warm-ups, runs, seconds of measured runs before stopping early) for a size."""
    if size <= MIB:
        return (2, 8, 1.0) if quick else (3, 30, 4.0)
    if size <= 64 * MIB:
        return (1, 2, 1.0) if quick else (1, 7, 4.0)
    return (1, 2, 8.0) if quick else (1, 3, 8.0)


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Result:
    """One cell: times (or why there are none) and how many runs were planned."""

    def __init__(self, times=None, planned=0, why=None):
        self.times, self.planned, self.why = times or [], planned, why

    def ok(self):
        return bool(self.times)

    def median(self):
        return stats(self.times)[0]

    def p90(self):
        return stats(self.times)[1]

    def cell(self):
        if not self.ok():
            return self.why
        med, p90 = stats(self.times)
        text = "%s (%s)" % (human(med), human(p90))
        if len(self.times) < self.planned:
            text += ", %d of %d runs (time budget)" % (len(self.times), self.planned)
        return text


def timed_runs(size, quick, update):
    """Calls update(r) for the warm-ups and runs; update returns its seconds."""
    warm, runs, budget = plan(size, quick)
    for r in range(warm):
        update(r)
    times, spent = [], 0.0
    for r in range(warm, warm + runs):
        t = update(r)
        times.append(t)
        spent += t
        if spent > budget and len(times) >= 2 and len(times) < runs:
            break
    return Result(times, runs)


def expect_acks(acks, version, who):
    """Waits (bounded) for one ack per worker, each naming version."""
    for i, a in enumerate(acks):
        if not a.poll(WAIT_S):
            raise RuntimeError("%s worker %d did not ack within %d s" % (who, i, WAIT_S))
        got = struct.unpack("<q", a.recv_bytes())[0]
        if got != version:
            raise RuntimeError("%s worker %d holds version %d, expected %d"
                               % (who, i, got, version))


def stop_procs(procs):
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.terminate()
            p.join(10)


# ---- torch.multiprocessing queues ----

def queue_worker(q, ack, shapes):
    torch.set_num_threads(1)
    params = [torch.full(s, 1.0) for s in shapes]     # its own model, faulted in
    while True:
        sd = q.get()
        if sd is None:
            return
        for p, name in zip(params, sorted(sd)):
            p.copy_(sd[name])
        del sd
        ack.send_bytes(struct.pack("<q", int(params[0].view(-1)[0])))


def run_queues(size, n, quick):
    ctx = tmp.get_context("fork")
    shapes = shapes_of(size)
    qs, acks, procs = [], [], []
    try:
        for _ in range(n):
            q = ctx.Queue()
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=queue_worker, args=(q, w, shapes), daemon=True)
            p.start()
            qs.append(q)
            acks.append(r)
            procs.append(p)
        # Shared before the first put, as torch's Hogwild example does: a put
        # moves a tensor into shared memory in a feeder thread, and N feeders
        # doing it at once race (EBADF).
        sd = {"layer%d.weight" % i: torch.full(s, 0.5).share_memory_()
              for i, s in enumerate(shapes)}

        def update(r):
            sd["layer0.weight"].view(-1)[0] = r
            t0 = time.perf_counter()
            for q in qs:
                q.put(sd)
            expect_acks(acks, r, "queue")
            return time.perf_counter() - t0
        return timed_runs(size, quick, update)
    finally:
        for q in qs:
            q.put(None)
        stop_procs(procs)


# ---- one shared buffer overwritten in place ----

def shared_worker(conn, buf, counter):
    while True:
        if conn.recv_bytes() == b"stop":
            return
        v = counter.value
        # Reads in place: the first weight carries the version the trainer wrote.
        conn.send_bytes(struct.pack("<q", int(buf[0]) if int(buf[0]) == v else -1))


def run_shared(size, n, quick):
    ctx = tmp.get_context("fork")
    shapes = shapes_of(size)
    buf = torch.full((size // 4,), 1.0).share_memory_()
    counter = ctx.RawValue("q", -1)
    conns, procs = [], []
    try:
        for _ in range(n):
            a, b = ctx.Pipe()
            p = ctx.Process(target=shared_worker, args=(b, buf, counter), daemon=True)
            p.start()
            conns.append(a)
            procs.append(p)
        weights = [torch.full(s, 0.5) for s in shapes]
        views, off = [], 0
        for s in shapes:
            views.append(buf[off:off + s[0] * s[1]].view(s))
            off += s[0] * s[1]

        def update(r):
            weights[0].view(-1)[0] = r
            t0 = time.perf_counter()
            for v, w in zip(views, weights):
                v.copy_(w)
            counter.value = r
            for c in conns:
                c.send_bytes(b"go")
            expect_acks(conns, r, "shared-buffer")
            return time.perf_counter() - t0
        return timed_runs(size, quick, update)
    finally:
        for c in conns:
            c.send_bytes(b"stop")
        stop_procs(procs)


# ---- torch.distributed gloo broadcast ----

def gloo_rank(rank, world, port, shapes, rounds, acks, out):
    """Rank 0 is the trainer: it times each broadcast until every rank acked."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=world,
                            timeout=__import__("datetime").timedelta(seconds=WAIT_S))
    ts = [torch.full(s, 0.5 if rank == 0 else 1.0) for s in shapes]
    times = []
    for r in range(rounds):
        if rank == 0:
            ts[0].view(-1)[0] = r
        dist.barrier()
        t0 = time.perf_counter()
        for t in ts:
            dist.broadcast(t, 0)
        if rank == 0:
            expect_acks(acks, r, "gloo")
            times.append(time.perf_counter() - t0)
        else:
            out.send_bytes(struct.pack("<q", int(ts[0].view(-1)[0])))
    if rank == 0:
        out.send_bytes(json.dumps(times).encode())
    dist.barrier()
    dist.destroy_process_group()


def run_gloo(size, n, quick):
    ctx = tmp.get_context("fork")
    warm, runs, _ = plan(size, quick)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    port = free_port()
    acks, procs = [], []
    try:
        for rank in range(1, n + 1):
            r, w = ctx.Pipe(duplex=False)
            acks.append(r)
            procs.append(ctx.Process(target=gloo_rank, daemon=True, args=(
                rank, n + 1, port, shapes_of(size), warm + runs, None, w)))
        res_r, res_w = ctx.Pipe(duplex=False)
        procs.insert(0, ctx.Process(target=gloo_rank, daemon=True, args=(
            0, n + 1, port, shapes_of(size), warm + runs, acks, res_w)))
        for p in procs:
            p.start()
        deadline = time.monotonic() + WAIT_S * (warm + runs)
        while not res_r.poll(1):
            if time.monotonic() > deadline or not procs[0].is_alive():
                raise RuntimeError("the gloo trainer rank stopped without its times")
        times = json.loads(res_r.recv_bytes())[warm:]
        return Result(times, runs)
    finally:
        stop_procs(procs)


# ---- the limit: one memcpy into pages that already exist ----

def run_memcpy(size, quick):
    """The faster of two layouts: source and destination at the same offset in a
    page, and 64 bytes apart (this CPU's memcpy is slow for some sizes in one
    of them); runs of the two alternate."""
    src = np.full(size + 4096, 1, np.uint8)
    dst = np.full(size + 4096, 2, np.uint8)
    warm, runs, _ = plan(size, quick)
    times = ([], [])
    for r in range(warm + 2 * runs):
        for layout, shift in enumerate((0, 64)):
            src[0] = r % 251
            t0 = time.perf_counter()
            np.copyto(dst[shift:shift + size], src[:size])
            t = time.perf_counter() - t0
            if r >= warm:
                times[layout].append(t)
    return min((Result(t, 2 * runs) for t in times), key=Result.median)


# ---- wsync: the Python helper's Publisher, watchers by link ----

class Wsync:
    """A hub on an ipc endpoint in a tmpfs directory, and N link watchers."""

    def __init__(self, bindir, base, n):
        self.bin, self.procs = bindir, []
        self.dir = tempfile.mkdtemp(prefix="torch-sync.", dir=base)
        self.ep = "ipc://%s/hub" % self.dir
        self.log = open(os.path.join(self.dir, "log"), "w")
        helptext = subprocess.run([self.prog("serve"), "--help"], capture_output=True,
                                  text=True).stdout
        self.recycle = "--recycle" in helptext
        self.start([self.prog("serve"), "-e", self.ep, "--store",
                    os.path.join(self.dir, "store"), "--keep", "1"] +
                   (["--recycle"] if self.recycle else []))
        self.wait_for(lambda: subprocess.run(
            [self.prog("inspect"), "-e", self.ep, "--hub", "-t", "0.5"],
            capture_output=True).returncode == 0, "the hub to answer")
        for i in range(n):
            self.start([self.prog("watch"), "-e", self.ep, "--id", "w%d" % i, "--transfer",
                        "link", "-m", "bench", "-o", os.path.join(self.dir, "w%d.wsync" % i)])
        self.wait_for(lambda: self.alive() >= n, "%d watchers to connect" % n)

    def prog(self, name):
        return os.path.join(self.bin, "wsync-" + name)

    def start(self, args):
        self.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log))

    def alive(self):
        r = subprocess.run([self.prog("inspect"), "-e", self.ep, "--hub", "--json", "-t", "1"],
                           capture_output=True)
        if r.returncode != 0:
            return 0
        return sum(1 for w in json.loads(r.stdout).get("workers", []) if w.get("alive"))

    def wait_for(self, cond, what, bound=20.0):
        deadline = time.monotonic() + bound
        while not cond():
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.log.flush()
                with open(self.log.name) as f:
                    raise RuntimeError("timed out waiting for %s: %s" % (what, f.read()[-500:]))
            time.sleep(0.02)

    def close(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_wsync(size, n, quick, bindir, base, helper):
    hub = Wsync(bindir, base, n)
    try:
        arrays = {"layer%d.weight" % i: np.full(s, 0.5, np.float32)
                  for i, s in enumerate(shapes_of(size))}
        with helper.Publisher(endpoint=hub.ep) as pub:
            def update(r):
                arrays["layer0.weight"].flat[0] = r
                t0 = time.perf_counter()
                pub.publish("bench", arrays, wait="all", timeout=WAIT_S)
                return time.perf_counter() - t0
            res = timed_runs(size, quick, update)
        res.recycle = hub.recycle
        return res
    finally:
        hub.close()


# ---- the table ----

def needs(method, size, n):
    """Bytes of memory a configuration holds at once (with slack for the store)."""
    return {"queues": (n + 1) * size, "shared": 2 * size, "gloo": (n + 2) * size,
            "memcpy": 2 * size, "wsync": 5 * size}[method]


def measure(method, size, n, args, helper):
    label = LABELS.get(size, "%d bytes" % size)
    if method in TORCH_METHODS and torch is None:
        return Result(why="skipped: python3-torch is not importable")
    need = needs(method, size, n) + GIB
    if need > mem_available():
        log("skipping %s, %s x %d: needs %d MiB of memory" % (method, label, n, need // MIB))
        return Result(why="skipped: needs %d MiB of memory" % (need // MIB))
    log("side by side: %s, %s%s" % (NAMES[method], label,
                                    "" if method == "memcpy" else " to %d workers" % n))
    started = time.monotonic()
    try:
        if method == "memcpy":
            return run_memcpy(size, args.quick)
        if method == "wsync":
            return run_wsync(size, n, args.quick, args.bin, args.tmp, helper)
        return {"queues": run_queues, "shared": run_shared, "gloo": run_gloo}[method](
            size, n, args.quick)
    except Exception as e:      # one failed configuration must not lose the table
        log("%s, %s x %d failed: %s" % (method, label, n, e))
        return Result(why="failed: %s" % str(e).splitlines()[0][:80] if str(e) else "failed")
    finally:
        gc.collect()
        log("... %.1f s" % (time.monotonic() - started))


def ratio(a, b):
    return "%.2fx" % (a.median() / b.median()) if a.ok() and b.ok() else "-"


def target(size, n, res):
    """The issue's target for this row, met or missed; '-' when it sets none."""
    w, shared, queues, limit = res["wsync"], res["shared"], res["queues"], res["memcpy"]
    if n != 8 or not w.ok():
        return "-"
    goals = []

    def judge(text, met, known=True):
        goals.append("%s: %s" % (text, ("met" if met else "missed") if known else "not measured"))
    if size == 256 * KIB:
        judge("<= 0.5 ms or <= 1.2x shared buffer",
              w.median() <= 0.5e-3 or (shared.ok() and w.median() <= 1.2 * shared.median()))
    elif size == 64 * MIB:
        judge("<= 1.5x shared buffer", shared.ok() and w.median() <= 1.5 * shared.median(),
              shared.ok())
    elif size == GIB:
        judge("<= 1.5x memcpy limit", limit.ok() and w.median() <= 1.5 * limit.median(),
              limit.ok())
    judge(">= 20x faster than queues", queues.ok() and queues.median() >= 20 * w.median(),
          queues.ok())
    return "; ".join(goals)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="directory of the wsync programs")
    ap.add_argument("--quick", action="store_true", help="256 KiB and 64 MiB, N=8, few runs")
    ap.add_argument("--rows", help="write bench/run table rows here")
    ap.add_argument("--section", help="write the side-by-side markdown section here")
    ap.add_argument("--sizes", help="comma list of 256k, 64m, 1g")
    ap.add_argument("--counts", help="comma list of worker counts")
    ap.add_argument("--methods", default="memcpy,wsync,shared,queues,gloo")
    ap.add_argument("--tmp", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = ap.parse_args()
    try:
        sizes = [SIZES[s] for s in (args.sizes or ("256k,64m" if args.quick
                                                   else "256k,64m,1g")).split(",")]
        counts = [int(c) for c in (args.counts or ("8" if args.quick else "1,4,8")).split(",")]
        methods = args.methods.split(",")
        assert all(m in NAMES for m in methods) and all(c > 0 for c in counts)
    except (KeyError, ValueError, AssertionError):
        ap.print_usage(sys.stderr)
        print("torch_sync.py: bad --sizes, --counts or --methods", file=sys.stderr)
        return 64
    for p in ("serve", "watch", "push", "inspect"):
        if not os.access(os.path.join(args.bin, "wsync-" + p), os.X_OK):
            print("torch_sync.py: %s/wsync-%s is missing (run make)" % (args.bin, p),
                  file=sys.stderr)
            return 66
    # Publisher runs wsync-push from PATH: this build's.
    os.environ["PATH"] = os.path.abspath(args.bin) + os.pathsep + os.environ.get("PATH", "")
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "examples", "python"))
    import wsync as helper
    if torch is not None:
        torch.set_num_threads(1)

    results = {}
    started = time.monotonic()
    for size in sizes:
        limit = measure("memcpy", size, 1, args, helper) if "memcpy" in methods else Result(
            why="not run")
        for n in counts:
            res = {"memcpy": limit}
            for m in ("wsync", "shared", "queues", "gloo"):
                res[m] = measure(m, size, n, args, helper) if m in methods else Result(
                    why="not run")
            results[size, n] = res
    log("side by side took %.0f s" % (time.monotonic() - started))

    rows = []
    if torch is None:
        rows.append("| side by side: torch queues, shared buffer, gloo | skipped: python3-torch "
                    "is not importable | - | - | - |")
    for size in sizes:
        label = LABELS[size]
        lim = results[size, counts[0]]["memcpy"]
        if lim.ok():
            rows.append("| side by side: memcpy limit, %s into existing pages | %s (%.1f GB/s) "
                        "| %s | - | - |" % (label, human(lim.median()),
                                            size / lim.median() / 1e9, human(lim.p90())))
        for n in counts:
            res = results[size, n]
            w = res["wsync"]
            name = "side by side: wsync Publisher, %s to %d worker%s, all acked" % (
                label, n, "" if n == 1 else "s")
            if not w.ok():
                rows.append("| %s | %s | - | - | - |" % (name, w.why))
                continue
            bases = [(b, res[b]) for b in ("memcpy", "shared", "queues") if res[b].ok()]
            rows.append("| %s%s | %s | %s | %s | %s |" % (
                name, "" if len(w.times) == w.planned else " (%d runs)" % len(w.times),
                human(w.median()), human(w.p90()),
                "; ".join("%s: %s" % (NAMES[b], human(r.median())) for b, r in bases) or "-",
                "; ".join(ratio(w, r) for _, r in bases) or "-"))

    recycle = any(getattr(r["wsync"], "recycle", False) for r in results.values())
    table = ["| model | workers | wsync | torch queues | shared buffer (tears) | gloo broadcast "
             "| memcpy limit | wsync / memcpy | wsync / shared | queues / wsync | target (N=8) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for size in sizes:
        for n in counts:
            res = results[size, n]
            table.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                LABELS[size], n, res["wsync"].cell(), res["queues"].cell(),
                res["shared"].cell(), res["gloo"].cell(), res["memcpy"].cell(),
                ratio(res["wsync"], res["memcpy"]), ratio(res["wsync"], res["shared"]),
                ratio(res["queues"], res["wsync"]), target(size, n, res)))
    notes = (
        "Each cell: median (p90) of the time from the trainer starting an update until all N "
        "workers acked holding it, after warm-ups; a configuration that ran out of its time "
        "budget says how many runs it got. The state dict is %d float32 tensors summing to the "
        "size, for every method. wsync: examples/python/wsync.py's Publisher (`wsync-push "
        "--batch`) publishing numpy arrays with wait=\"all\" to a hub (`wsync-serve --keep 1`%s, "
        "store on tmpfs, ipc) and N `wsync-watch --transfer link` workers (each verifies and "
        "acks). torch queues: torch.multiprocessing (fork, %s sharing), the trainer puts its "
        "state dict in one queue per worker (its tensors are moved into shared memory at the "
        "start, share_memory_(), so puts send handles), each worker copies it into its own "
        "parameters and acks on a pipe. Shared buffer: the trainer copies its weights into one "
        "share_memory_() tensor, bumps a shared counter and sends each worker a pipe message; "
        "workers read in place (no copy) and ack; it tears. gloo: torch.distributed broadcast "
        "of each tensor over N+1 ranks on 127.0.0.1, then every worker acks on a pipe. memcpy "
        "limit: numpy.copyto into pre-faulted pages. One thread per process (torch."
        "set_num_threads(1)). Targets (issue 8, N=8): 256 KiB <= 0.5 ms or <= 1.2x shared "
        "buffer; 64 MiB <= 1.5x shared buffer; 1 GiB <= 1.5x memcpy limit; every size >= 20x "
        "faster than queues. %s The machine is shared and noisy (2 cores, 4 engineers): "
        "compare ratios within one run." % (
            NPARTS, " --recycle" if recycle else "",
            torch.multiprocessing.get_sharing_strategy() if torch is not None else "-",
            "torch %s." % torch.__version__ if torch is not None else
            "python3-torch is not importable: the torch columns are skipped."))
    section = "## Side by side with PyTorch's ways\n\n%s\n\n%s\n" % ("\n".join(table), notes)
    if args.rows:
        with open(args.rows, "w") as f:
            f.write("".join(r + "\n" for r in rows))
    if args.section:
        with open(args.section, "w") as f:
            f.write(section)
    if not args.rows and not args.section:
        print("\n".join(rows) + "\n\n" + section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
