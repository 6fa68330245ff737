#!/usr/bin/env python3
"""ctest gpt_vs_pytorch: the gpt sample's losses in every mode against PyTorch's, step by step.

Runs gpt_reference.py into a temporary directory (initial weights, one batch, PyTorch's losses),
then the sample in each mode from those weights on that batch (its layers in a lax::scan), and
compares every step's loss with PyTorch's: |meshvk - torch| <= tolerance * |torch|. Then:
  - the layers unrolled (--unrolled) in --unrolled-modes, 3 steps: the same losses as the
    scan's, to --scan-tolerance (the same float32 operations, so equal up to summation order);
  - the program's size does not grow with the layers: --layers 4 prints the same "program size"
    as --layers 2 with the scan, in the first mode;
  - bf16 mixed precision (--dtype bf16) in --bf16-modes against gpt_reference.py --dtype bf16
    (the same casts in PyTorch), to --bf16-tolerance.
Prints a table of the relative differences and exits 1 when one is over, or when a run fails.

    /usr/bin/python3 tests/models/gpt_check.py --sample build/bin/gpt [--steps 10]
        [--modes single,dp,dp_tp,fsdp,sp] [--tolerance 1e-5] [--unrolled-modes dp_tp]
        [--bf16-modes single] [--bf16-tolerance 1e-4]
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
SIZE = re.compile(r"^program size: (\d+) lines", re.M)


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
    ap.add_argument("--unrolled-modes", default="dp_tp",
                    help="modes also run with the layers unrolled (empty: none)")
    ap.add_argument("--scan-tolerance", type=float, default=1e-6)
    ap.add_argument("--bf16-modes", default="single", help="modes also run with --dtype bf16")
    ap.add_argument("--bf16-tolerance", type=float, default=1e-4)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401  (only to say what is missing before anything runs)
    except ImportError:
        raise SystemExit(f"no PyTorch for {sys.executable}: apt install python3-torch python3-numpy")

    def modes(text):
        return [m for m in text.split(",") if m]

    with tempfile.TemporaryDirectory(prefix="meshvk-gpt-") as tmp:
        bf16_dir = os.path.join(tmp, "bf16")
        refs = [("f32", tmp)] + ([("bf16", bf16_dir)] if modes(args.bf16_modes) else [])
        # The references run side by side (PyTorch keeps to one thread).
        procs = [(dtype, out, time.monotonic(), subprocess.Popen(
            [sys.executable, os.path.join(HERE, "gpt_reference.py"), "--out", out, "--steps",
             str(args.steps), "--seed", str(args.seed), "--dtype", dtype],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) for dtype, out in refs]
        want = {}
        for dtype, out, start, proc in procs:
            stdout, stderr = proc.communicate()
            if proc.returncode != 0:
                sys.stdout.write(stdout[-6000:])
                sys.stderr.write(stderr[-6000:])
                raise SystemExit(f"gpt_reference.py --dtype {dtype} exited with {proc.returncode}")
            with open(os.path.join(out, "losses.txt")) as f:
                want[dtype] = [float(line) for line in f if line.strip()]
            print(f"PyTorch {dtype} {time.monotonic() - start:.1f} s: " +
                  " ".join(f"{v:.6f}" for v in want[dtype]), flush=True)
        weights = ["--weights", os.path.join(tmp, "weights"),
                   "--batch-file", os.path.join(tmp, "batch.npy")]
        failed = []

        def sample(label, extra, steps=args.steps, data=True):
            out, seconds = run([args.sample, "--steps", str(steps), "--no-color"] +
                               (weights if data else []) + extra, f"gpt {' '.join(extra)}")
            got = [float(m.group(3)) for m in STEP.finditer(out)]
            size = SIZE.search(out)
            if len(got) != steps or not size:
                sys.stdout.write(out[-4000:])
                raise SystemExit(f"gpt {' '.join(extra)} printed {len(got)} losses (want {steps})"
                                 f"{'' if size else ' and no program size'}")
            return got, int(size.group(1)), out, seconds

        def compare(label, got, ref, tolerance, seconds, extra=""):
            rel = [abs(g - w) / abs(w) for g, w in zip(got, ref)]
            worst = max(rel)
            ok = worst <= tolerance
            print(f"{label:14s} {seconds:5.1f} s  max relative difference {worst:.2e} "
                  f"(step {rel.index(worst) + 1})  {'ok' if ok else 'OVER ' + str(tolerance)}"
                  f"{extra}")
            print("               " + " ".join(f"{r:.1e}" for r in rel))
            sys.stdout.flush()
            if not ok:
                failed.append(label)
            return worst

        worst_all = 0.0
        scan = {}
        for mode in modes(args.modes):
            got, size, out, seconds = sample(mode, ["--mode", mode])
            scan[mode] = (got, size)
            worst_all = max(worst_all, compare(mode, got, want["f32"], args.tolerance, seconds,
                                               f"  program {size} lines"))
            collectives = re.search(r"^collectives per step:.*$", out, re.M)
            if collectives:
                print("               " + collectives.group(0), flush=True)
        print(f"worst relative difference to PyTorch over every mode and step: {worst_all:.2e} "
              f"(tolerance {args.tolerance})")

        for mode in modes(args.unrolled_modes):
            # A few steps: the two compute the same float32 operations.
            got, size, _, seconds = sample(mode, ["--mode", mode, "--unrolled"],
                                           steps=min(3, args.steps))
            ref, scan_size = scan[mode] if mode in scan else sample(mode, ["--mode", mode])[:2]
            compare(f"{mode} unrolled", got, ref, args.scan_tolerance, seconds,
                    f" to the scan's  program {size} lines (scan {scan_size})")

        if modes(args.modes):
            mode = modes(args.modes)[0]
            _, size4, _, seconds = sample(mode, ["--mode", mode, "--layers", "4"], steps=1,
                                          data=False)
            size2 = scan[mode][1]
            ok = size4 == size2
            print(f"program size with the layers in a scan, --mode {mode}: {size2} lines with 2 "
                  f"layers, {size4} with 4 ({seconds:.1f} s)  {'ok' if ok else 'GREW'}")
            if not ok:
                failed.append("program size")

        for mode in modes(args.bf16_modes):
            got, _, _, seconds = sample(mode, ["--mode", mode, "--dtype", "bf16"])
            compare(f"{mode} bf16", got, want["bf16"], args.bf16_tolerance, seconds,
                    "  to PyTorch's bf16")
        if failed:
            raise SystemExit("over tolerance: " + ", ".join(failed))


if __name__ == "__main__":
    main()
