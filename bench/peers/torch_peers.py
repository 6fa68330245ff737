#!/usr/bin/python3
"""PyTorch's side of `meshvk-bench peers`: the same rows, timed the same way (median of --reps
runs after one warm-up), printed one per line for the bench to parse:

    result <task> <seconds>
    error <task> <why>

Usage (the bench starts it; by hand works too):
    torch_peers.py --threads T --reps R single TASK...
    torch_peers.py --threads T --reps R --world W dist TASK...

single tasks run in this process with torch.set_num_threads(T):
    train:B  gpt:B  matmul:N  sin:N  sum:N  xent:BxC
dist tasks run over W gloo processes on the CPU, each with max(1, T // W) threads:
    train-dp:B  all-reduce:BYTES  all-gather:BYTES  reduce-scatter:BYTES
Sizes follow nccl-tests: BYTES is each rank's send buffer, except all-gather's, which is the
gathered total. Torch 1.13's gloo has no reduce_scatter, so reduce-scatter runs as the nearest
thing a gloo user has: all_reduce, then each rank keeps its slice (named so in the result).
"""
import argparse
import os
import socket
import statistics
import sys
import time

import torch

MLP_SIZES = [784, 1024, 1024, 1024, 10]


def median_seconds(reps, run, sync=None):
    run()  # warm-up
    times = []
    for _ in range(max(reps, 1)):
        if sync:
            sync()
        start = time.perf_counter()
        run()
        if sync:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median_low(times) if len(times) % 2 == 0 else statistics.median(times)


def mlp():
    layers = []
    for i, o in zip(MLP_SIZES, MLP_SIZES[1:]):
        # meshvk's nn::mlp puts max(x, 0) after every layer, the last one too.
        layers += [torch.nn.Linear(i, o), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def train_step(model, opt, x, y):
    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return step


def single(task, arg, reps):
    g = torch.Generator().manual_seed(0)
    if task == "train":
        batch = int(arg)
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(batch, MLP_SIZES[0], generator=g)
        y = torch.randn(batch, MLP_SIZES[-1], generator=g)
        return median_seconds(reps, train_step(model, opt, x, y))
    if task == "gpt":
        # The sample's GPT (tests/models/gpt_reference.py), one step: forward, cross-entropy,
        # backward, Adam, on one batch of `arg` windows of 64 tokens.
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "tests", "models"))
        import gpt_reference
        batch, seq, vocab = int(arg), 64, 256
        torch.manual_seed(0)
        model = gpt_reference.Gpt(vocab, 128, 4, 2, seq)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        tokens = torch.randint(0, vocab, (batch, seq), generator=g)
        targets = torch.randint(0, vocab, (batch, seq), generator=g)

        def step():
            opt.zero_grad(set_to_none=True)
            logits = model(tokens)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
            loss.backward()
            opt.step()
        return median_seconds(reps, step)
    if task == "matmul":
        n = int(arg)
        a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
        return median_seconds(reps, lambda: torch.mm(a, b))
    if task == "sin":
        x = torch.randn(int(arg), generator=g)
        return median_seconds(reps, lambda: 2 * torch.sin(x) + 1)
    if task == "sum":
        x = torch.randn(int(arg), generator=g)
        return median_seconds(reps, lambda: x.sum())
    if task == "xent":
        batch, classes = (int(v) for v in arg.split("x"))
        logits = torch.randn(batch, classes, generator=g)
        labels = torch.randint(0, classes, (batch,), generator=g)
        return median_seconds(reps, lambda: torch.nn.functional.cross_entropy(logits, labels))
    raise ValueError(f"unknown single task {task!r}")


def dist_worker(rank, world, port, threads, reps, tasks, queue):
    import torch.distributed as dist
    torch.set_num_threads(threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for spec in tasks:
        task, _, arg = spec.partition(":")
        try:
            if task == "train-dp":
                batch = int(arg)
                if batch % world:
                    raise ValueError(f"batch {batch} is not a multiple of {world} processes")
                torch.manual_seed(0)  # the same initial parameters on every rank
                model = torch.nn.parallel.DistributedDataParallel(mlp())
                opt = torch.optim.SGD(model.parameters(), lr=1e-3)
                g = torch.Generator().manual_seed(1 + rank)
                x = torch.randn(batch // world, MLP_SIZES[0], generator=g)
                y = torch.randn(batch // world, MLP_SIZES[-1], generator=g)
                run = train_step(model, opt, x, y)
            else:
                nbytes = int(arg)
                if task == "all-reduce":
                    t = torch.ones(nbytes // 4)
                    run = lambda: dist.all_reduce(t)  # noqa: E731
                elif task == "all-gather":
                    # gloo has no all_gather_into_tensor in 1.13: the list form.
                    t = torch.ones(nbytes // 4 // world)
                    outs = [torch.empty_like(t) for _ in range(world)]
                    run = lambda: dist.all_gather(outs, t)  # noqa: E731
                elif task == "reduce-scatter":
                    t = torch.ones(nbytes // 4)
                    piece = nbytes // 4 // world
                    mine = torch.empty(piece)

                    def run():
                        dist.all_reduce(t)
                        mine.copy_(t[rank * piece:(rank + 1) * piece])
                else:
                    raise ValueError(f"unknown dist task {task!r}")
            seconds = median_seconds(reps, run, sync=dist.barrier)
            if rank == 0:
                queue.put(("result", spec, seconds))
        except Exception as e:  # the row says why; the other tasks still run
            if rank == 0:
                queue.put(("error", spec, f"{type(e).__name__}: {e}"))
            dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--world", type=int, default=8)
    p.add_argument("mode", choices=["single", "dist"])
    p.add_argument("tasks", nargs="+")
    a = p.parse_args()
    print(f"info torch {torch.__version__}", flush=True)
    if a.mode == "single":
        torch.set_num_threads(a.threads)
        for spec in a.tasks:
            task, _, arg = spec.partition(":")
            try:
                print(f"result {spec} {single(task, arg, a.reps):.9f}", flush=True)
            except Exception as e:
                print(f"error {spec} {type(e).__name__}: {e}", flush=True)
        return 0
    import torch.multiprocessing as mp
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        for spec in a.tasks:
            print(f"error {spec} torch.distributed with gloo is not available", flush=True)
        return 0
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    threads = max(1, a.threads // a.world)
    print(f"info {a.world} gloo processes with {threads} thread(s) each", flush=True)
    port = free_port()
    procs = [ctx.Process(target=dist_worker, args=(r, a.world, port, threads, a.reps, a.tasks,
                                                   queue)) for r in range(a.world)]
    for proc in procs:
        proc.start()
    reported = 0
    while reported < len(a.tasks):
        # Rank 0 reports each task in order; a dead worker ends the wait.
        if not queue.empty():
            kind, spec, value = queue.get()
            print(f"{kind} {spec} {value:.9f}" if kind == "result" else f"{kind} {spec} {value}",
                  flush=True)
            reported += 1
            continue
        dead = [proc for proc in procs if proc.exitcode not in (None, 0)]
        if dead or all(proc.exitcode == 0 for proc in procs):
            why = (f"gloo process exited with {dead[0].exitcode}" if dead else
                   "the gloo processes ended without reporting")
            print(f"info {why}", flush=True)
            break
        time.sleep(0.01)
    for proc in procs:
        proc.join(timeout=60)
        if proc.exitcode is None:
            proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
