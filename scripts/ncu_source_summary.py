#!/usr/bin/env python3
"""Summarizes an Nsight Compute source page (SASS, one row an instruction) per kernel.

The input is what this command writes on the GPU machine (the CSV is large: ~400 KB a kernel):

  ncu --clock-control none -k regex:moe_gemm_swap_ab -c 2 --section SourceCounters \
      --section WarpStateStats --page source --print-source sass --csv \
      .device/moejit_bench --only moe --quant mxfp4_packed --shapes gpt-oss-120b --tokens 4 > src.csv

For each profiled kernel it prints the warps launched, the warp instructions executed (in all and
a warp), the stall samples by reason, the instruction mix by opcode and the instructions with the
most stall samples. `--loop N` also lists every instruction executed at least N times (the k loop's
body, with its executions and samples). Usage: ncu_source_summary.py src.csv [--top K] [--loop N]
"""
import argparse
import collections
import csv
import io
import sys


def kernels(path):
    """(kernel name, header, rows) for each kernel section of the CSV (ncu's own lines skipped)."""
    sections, current = [], None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith('"Kernel Name"'):
                current = [line.split('","', 1)[1].rstrip().rstrip(",").strip('"'), []]
                sections.append(current)
            elif current is not None and line.startswith('"'):
                current[1].append(line)
    for name, lines in sections:
        rows = list(csv.reader(io.StringIO("".join(lines))))
        if rows:
            yield name, rows[0], rows[1:]


def number(text):
    try:
        return int(text)
    except ValueError:
        return 0


def opcode(sass):
    words = sass.split()
    if words and words[0].startswith("@"):  # guard predicate
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def summarize(name, header, rows, top, loop):
    col = {h: i for i, h in enumerate(header)}
    for needed in ("Source", "Instructions Executed", "Warp Stall Sampling (All Samples)"):
        if needed not in col:
            sys.exit(f"{name}: no '{needed}' column (was the source page printed with --csv?)")
    executed = [number(r[col["Instructions Executed"]]) for r in rows]
    samples = [number(r[col["Warp Stall Sampling (All Samples)"]]) for r in rows]
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    warps = executed[0] if executed else 0  # the kernel's first instruction runs once a warp
    total = sum(executed)
    print(f"== {name}")
    print(f"   {warps} warps, {total} warp instructions ({total / max(warps, 1):.0f} a warp), "
          f"{sum(samples)} stall samples")
    by_reason = {h[len("stall_"):]: sum(number(r[col[h]]) for r in rows) for h in reasons}
    print("   samples by reason: " + ", ".join(f"{k} {v}" for k, v in
                                                 sorted(by_reason.items(), key=lambda kv: -kv[1]) if v))
    mix = collections.Counter()
    for r, e in zip(rows, executed):
        mix[opcode(r[col["Source"]].strip())] += e
    print("   mix (% of executed): " + ", ".join(f"{k} {100 * v / max(total, 1):.1f}" for k, v in mix.most_common(16)))
    print("   most samples (address, SASS, samples, executions, top reasons):")
    order = sorted(range(len(rows)), key=lambda i: -samples[i])
    for i in order[:top]:
        r = rows[i]
        main = sorted(((number(r[col[h]]), h[len("stall_"):]) for h in reasons), reverse=True)[:2]
        print(f"     {r[0][-5:]} {r[col['Source']].strip()[:48]:48} {samples[i]:6} {executed[i]:8}  "
              + ", ".join(f"{k} {v}" for v, k in main if v))
    if loop:
        print(f"   instructions executed at least {loop} times (address, executions, samples, SASS):")
        for r, e, s in zip(rows, executed, samples):
            if e >= loop:
                print(f"     {r[0][-5:]} {e:8} {s:6}  {r[col['Source']].strip()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=10, help="instructions with the most samples to list")
    parser.add_argument("--loop", type=int, default=0, help="list instructions executed at least this often")
    args = parser.parse_args()
    found = False
    for name, header, rows in kernels(args.csv):
        summarize(name, header, rows, args.top, args.loop)
        found = True
    if not found:
        sys.exit(f"{args.csv}: no kernel section (expected ncu --page source --print-source sass --csv output)")


if __name__ == "__main__":
    main()
