"""The Markdown table of docs/benchmarks.md's pix2pix study from a committed JSON of
`bin/bench.py --suite=pix2pix_study` (tests/benchmarks/test_pix2pix_study.py checks the
page's table against this command's output).

    python benchmarks/probes/pix2pix_table.py benchmarks/results/pix2pix_study_zen4_2026-11-29.json
"""

from __future__ import annotations

import json
import sys

FEATURES = {"baseline": "baseline (1 process, 2 cores)",
            "data_parallel": "data parallel (2 processes, 1 core each)",
            "mixed_precision": "mixed precision (bfloat16)",
            "accumulation": "accumulation 4", "clipping": "clipping at norm 2",
            "sharded_state": "sharded optimizer state (2 processes)"}


def table(result: dict) -> str:
    arms, study = result["arms"], result["study_seconds_per_epoch"]
    base = arms["baseline"]["seconds_per_epoch"] if "baseline" in arms else None
    lines = ["| feature | s/epoch | vs baseline | the study's s/epoch | peak memory per "
             "process | state per device | loss D | loss G | val L1 (identity) | PSNR | "
             "SSIM |", "| --- " * 11 + "|"]
    # The study's order (the JSON's keys are sorted).
    for name in sorted(arms, key=lambda n: list(FEATURES).index(n) if n in FEATURES else 99):
        row = arms[name]
        seconds, validation = row["seconds_per_epoch"], row["validation"]
        placed = row.get("variable_gib_per_device")
        state = (" / ".join(f"{1024 * v:.1f} MiB" for v in placed.values()) if placed
                 else "–")
        cells = [FEATURES.get(name, name), f"{seconds:.1f}",
                 f"{base / seconds:.2f}x" if base else "–",
                 f"{study[name]:.2f}" if name in study else "–",
                 f"{row['peak_rss_gib']:.2f} GiB", state,
                 f"{row['final_losses']['loss/D']:.3f}", f"{row['final_losses']['loss/G']:.2f}",
                 f"{validation['l1']:.4f} ({validation['l1_identity']:.4f})",
                 f"{validation['psnr']:.2f}", f"{validation['ssim']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv) -> None:
    with open(argv[1]) as f:
        print(table(json.load(f)))


if __name__ == "__main__":
    main(sys.argv)
