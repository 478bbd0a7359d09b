#!/usr/bin/env python3
"""plot.py — the probe report's figures (matplotlib; run by report.py with .deps/venv's python).

Reads the series report.py computed (JSON on stdin or --series FILE) and writes one PNG per tier:
retention vs budget per policy, one panel per region group (pinned, unpinned).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"random": ("tab:gray", ":", "x"), "recency": ("tab:orange", "--", "s"),
         "h2o": ("tab:blue", "-.", "^"), "memdecay": ("tab:green", "-", "o"),
         "memdecay-norm": ("tab:red", "-", "D"), "recency+nopin": ("tab:brown", ":", "v")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", help="JSON file (default: stdin)")
    ap.add_argument("--outdir", required=True)
    a = ap.parse_args()
    data = json.load(open(a.series) if a.series else sys.stdin)
    os.makedirs(a.outdir, exist_ok=True)
    written = []
    for tier, groups in data["tiers"].items():
        fig, axes = plt.subplots(1, len(groups), figsize=(5.2 * len(groups), 3.8), sharey=True)
        if len(groups) == 1:
            axes = [axes]
        for ax, (group, series) in zip(axes, groups.items()):
            for policy, pts in series.items():
                pts = [p for p in pts if p["n"] > 0]
                if not pts:
                    continue
                c, ls, m = STYLE.get(policy, ("black", "-", "."))
                ax.plot([100 * p["budget"] for p in pts], [100 * p["retention"] for p in pts],
                        color=c, linestyle=ls, marker=m, label=policy)
            n = max((p["n"] for s in series.values() for p in s), default=0)
            ax.set_title(f"{tier} tier — {group} (≤{n} probes per point)")
            ax.set_xlabel("KV budget (% of trace tokens)")
            ax.set_xlim(0, 100)
            ax.set_ylim(-3, 103)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("retention vs full-cache ceiling (%)")
        axes[-1].legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        path = os.path.join(a.outdir, f"probes_retention_{tier}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    print("\n".join(written))


if __name__ == "__main__":
    main()
