#!/usr/bin/env python3
"""ctest gpt_vs_pytorch: the gpt sample's losses in every mode against PyTorch's, step by step.

Runs gpt_reference.py into a temporary directory (initial weights, one batch, PyTorch's losses),
then the sample in each mode from those weights on that batch, and compares every step's loss
with PyTorch's: |meshvk - torch| <= tolerance * |torch|. Prints a table of the relative
differences and exits 1 when one is over, or when a run fails.

    /usr/bin/python3 tests/models/gpt_check.py --sample build/bin/gpt [--steps 10]
        [--modes single,dp,dp_tp,fsdp,sp] [--tolerance 1e-5]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEP = re.compile(r"^step (\d+)/(\d+)  loss (\S+)", re.M)


def run(argv, what):
    start = time.monotonic()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seconds = time.monotonic() - start
    if p.returncode != 0:
        sys.stdout.write(p.stdout[-6000:])
        sys.stderr.write(p.stderr[-6000:])
        raise SystemExit(f"{what} exited with {p.returncode}: {' '.join(argv)}")
    # Under ctest the Khronos validation layer is on: anything it says is a failure.
    if "[vulkan validation" in p.stderr:
        sys.stderr.write(p.stderr[-6000:])
        raise SystemExit(f"{what}: the validation layer reported something")
    return p.stdout, seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample", required=True, help="the gpt sample binary")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--modes", default="single,dp,dp_tp,fsdp,sp")
    ap.add_argument("--tolerance", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401  (only to say what is missing before anything runs)
    except ImportError:
        raise SystemExit(f"no PyTorch for {sys.executable}: apt install python3-torch python3-numpy")

    with tempfile.TemporaryDirectory(prefix="meshvk-gpt-") as tmp:
        _, seconds = run([sys.executable, os.path.join(HERE, "gpt_reference.py"), "--out", tmp,
                          "--steps", str(args.steps), "--seed", str(args.seed)], "gpt_reference.py")
        with open(os.path.join(tmp, "losses.txt")) as f:
            want = [float(line) for line in f if line.strip()]
        print(f"PyTorch {seconds:.1f} s: " + " ".join(f"{v:.6f}" for v in want), flush=True)
        worst_all = 0.0
        failed = []
        for mode in args.modes.split(","):
            out, seconds = run([args.sample, "--mode", mode, "--steps", str(args.steps),
                                "--weights", os.path.join(tmp, "weights"),
                                "--batch-file", os.path.join(tmp, "batch.npy"), "--no-color"],
                               f"gpt --mode {mode}")
            got = [float(m.group(3)) for m in STEP.finditer(out)]
            collectives = re.search(r"^collectives per step:.*$", out, re.M)
            if len(got) != len(want):
                sys.stdout.write(out[-4000:])
                raise SystemExit(f"gpt --mode {mode} printed {len(got)} losses, want {len(want)}")
            rel = [abs(g - w) / abs(w) for g, w in zip(got, want)]
            worst = max(rel)
            worst_all = max(worst_all, worst)
            ok = worst <= args.tolerance
            print(f"{mode:7s} {seconds:5.1f} s  max relative difference {worst:.2e} "
                  f"(step {rel.index(worst) + 1})  {'ok' if ok else 'OVER ' + str(args.tolerance)}")
            print("        " + " ".join(f"{r:.1e}" for r in rel))
            if collectives:
                print("        " + collectives.group(0))
            sys.stdout.flush()
            if not ok:
                failed.append(mode)
        print(f"worst relative difference over every mode and step: {worst_all:.2e} "
              f"(tolerance {args.tolerance})")
        if failed:
            raise SystemExit("losses differ from PyTorch's in: " + ", ".join(failed))


if __name__ == "__main__":
    main()
