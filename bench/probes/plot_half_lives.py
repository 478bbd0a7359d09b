#!/usr/bin/env python3
"""plot_half_lives.py — docs/img/probes_half_lives.png from results/half_lives.json (matplotlib).

One panel per refresh setting: the half-life per region (geometric MLE, 95% interval as error
bars, Kaplan–Meier as a cross), log scale, the paper's ranges shaded where it gives numbers.
Run with .deps/venv's python (bench/probes/setup.sh installs matplotlib).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probelib import REGIONS  # noqa: E402  (the ABI header's one list)
PAPER = {"system": (148, 189), "scratchpad": (14, 16)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=os.path.join(HERE, "results", "half_lives.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img", "probes_half_lives.png"))
    a = ap.parse_args()
    hl = json.load(open(a.json))
    settings = hl["settings"]
    fig, axes = plt.subplots(1, len(settings), figsize=(5.6 * len(settings), 3.9), sharey=True)
    if len(settings) == 1:
        axes = [axes]
    for ax, s in zip(axes, settings):
        xs = list(range(len(REGIONS)))
        for i, r in enumerate(REGIONS):
            e = s["regions"].get(r)
            if not e or e["half_life_steps"] is None:
                continue
            h = e["half_life_steps"]
            lo, hi = e["ci95"]
            ax.errorbar([i], [h], yerr=[[h - lo], [hi - h]], fmt="o", color="tab:green",
                        capsize=3, label="MLE, 95% CI" if i == 0 else None)
            km = e.get("km_half_life_steps")
            if km:
                ax.plot([i], [km], "x", color="tab:gray", label="Kaplan–Meier" if i == 0 else None)
            if r in PAPER:
                ax.fill_between([i - 0.35, i + 0.35], *PAPER[r], color="tab:orange", alpha=0.35,
                                label="paper (Qwen2.5)" if r == "system" else None)
        n = hl.get("trace_tokens_max")
        if n:
            ax.axhline(n, color="tab:red", linestyle=":", linewidth=1,
                       label="trace length" if s is settings[0] else None)
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels(REGIONS, rotation=35, ha="right")
        ax.set_title(f"SmolLM2-135M, τ = {s['tau']:g} ({s['norm']})")
        ax.grid(alpha=0.3, which="both", axis="y")
    axes[0].set_ylabel("attention half-life (steps)")
    axes[0].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(a.out)


if __name__ == "__main__":
    main()
