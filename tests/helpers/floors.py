"""The folders of paragan_tf/ as floors: the table tests/test_architecture.py holds against
the code's imports, and the picture of docs/architecture.md drawn from it.

A room is a folder of paragan_tf/ (its modules, subfolders included) or one of the
top-level modules. A room may import from its own floor and the floors below; no two rooms
import each other. Print the figures of any checkout (rooms, arrows, arrows back up, pairs
of rooms importing each other) and the picture:

    python -m tests.helpers.floors [--root=CHECKOUT] [--draw]
"""

from __future__ import annotations

import argparse
import ast
import collections
import glob
import os
import textwrap
from typing import Dict, List, Tuple

from tests.helpers.repo import REPO

# Lowest first: (room, what it holds). A room is a folder of paragan_tf/ or a top-level
# module, named by its path under paragan_tf/.
FLOORS: List[List[Tuple[str, str]]] = [
    [("config.py", "gin parsing"),
     ("errors.py", "the errors a user reads"),
     ("files.py", "written whole, then renamed: read by other processes"),
     ("precision.py", "the policies; float16 loss scaling, the one place"),
     ("tfgan_compat.py", "tensorflow-gan's losses and metrics without its __init__"),
     ("teardown.py", "tf.data iterators parked, never destroyed; the one exit")],
    [("models/", "layers (SN conv/dense, class-conditional BN, fused where it is plain, "
                 "in groups) · blocks (BigGAN's attention and residual blocks) · "
                 "thin_convs (kernel gradients as matmuls where few output positions) · "
                 "recompute · count_trainable · round_up (every family's widths)")],
    [("data/", "config · datasets (the registry) · decoding (encoded images -> examples; "
               "corrupt files) · pipeline · tuning (the input tuner) · records, prepare, "
               "prepare_images, image_files (prepared data, folders) · class_groups · "
               "class_list · service"),
     ("layout/", "rules (hardware; precision, padding, XLA; LayoutConfig; the one auto "
                 "precision) · choice (one type for what a measurement decides) · env (the "
                 "variables TensorFlow starts with: oneDNN, threads; the restart protocol) · "
                 "cache (per machine) · candidates (what each stage of the tuner times)"),
     ("distribute/", "strategy · cluster (TF_CONFIG, Slurm) · server · launcher · mode "
                     "(what a parallel mode owns; the default, replicated) · model_parallel "
                     "(the other modes, one class each: refusals, a replica's devices, "
                     "placement, how an update applies, the mode's memory and traffic plan "
                     "read through the plan's own methods) · staging (a block's forward and "
                     "backward on its pipeline stage) · sharded_adam")],
    [("scale/", "plan (time, memory, efficiency per device count: bin/plan.py) · modes "
                "(every mode's plan; the one needed) · devices (the catalogue) · memory "
                "(the per-replica memory plan, replayed from traced updates) · graphs (what "
                "a traced update is to the plans) · roofline · step_model · flops · "
                "cpu_peak · calibration (every measured constant) · measured (steps timed "
                "on the user's devices)"),
     ("objective/", "losses (loss pairs) · penalties (R1/R2, LeCam, bCR) · d_terms (D's "
                    "extra terms in a step) · regularizers (orthogonal) · augment "
                    "(DiffAugment) · ada"),
     ("generate/", "sampling (grids, interpolation, standing BN) · images · export (a "
                   "noise-to-image generator) · translate (your own images through a "
                   "translator)")],
    [("eval/", "evaluator (distances of samples to the data) · subject (what a family or "
               "an evaluator reads of a run) · config · history · features · inception · "
               "classifier · metrics · reference_stats")],
    [("families/", "GAN families as named plugins (families.md): contract (Family, "
                   "Objective, NoBlocks) · registry · biggan/ (networks, objective, family) "
                   "· pix2pix/ (networks, losses, objective, test_time, evaluator, export, "
                   "family)")],
    [("train/", "settings (every option, read from gin in one place; the family decided "
                "once) · experiment (build; restore a finished run) · driver (one run) · "
                "controller (the loop) · trainer · sync_trainer · async_trainer, "
                "async_closures, sample_buffer · step (one replica's D and G updates) · "
                "nan_guard · bookkeeping · ema · optimizers · checkpoints · model_dir · "
                "run_files · preemption · profiling · sweep · config")],
    [("measure/", "what builds and times a real step: tuning (the layout measured for a "
                  "step: cache key, choice) · timing (candidates in probe child processes, "
                  "within the budget) · probe · step_timer (the one step timer) · traced "
                  "(the step's own updates traced for the plans) · built (what the plans "
                  "say of a built run; --calibrate)")],
]


def floor_of() -> Dict[str, int]:
    """{room: its floor}."""
    return {room: index for index, floor in enumerate(FLOORS) for room, _ in floor}


def room_of(module: str, root: str = REPO) -> str:
    """The room of a paragan_tf module or package ('paragan_tf' itself: '__init__.py')."""
    parts = module.split(".")[1:]
    if not parts:
        return "__init__.py"
    if os.path.isdir(os.path.join(root, "paragan_tf", parts[0])):
        return parts[0] + "/"
    return parts[0] + ".py"


def _imported(node):
    """The paragan_tf modules an import statement names (`from paragan_tf import x`: x)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        if node.module == "paragan_tf":
            return [f"paragan_tf.{alias.name}" for alias in node.names]
        return [node.module]
    return []


def arrows(root: str = REPO) -> Dict[Tuple[str, str], List[str]]:
    """{(room, room it imports from): the importing modules' 'file: imported module'}."""
    found = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(root, "paragan_tf", "**", "*.py"),
                                 recursive=True)):
        rel = os.path.relpath(path, root)
        module = rel[:-3].replace(os.sep, ".")
        source = room_of(module, root)
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            for name in _imported(node):
                if name.startswith("paragan_tf.") and room_of(name, root) != source:
                    found[(source, room_of(name, root))].append(f"{rel}: {name}")
    return dict(found)


def back_up(found: Dict[Tuple[str, str], List[str]]) -> List[str]:
    """Every arrow from a lower floor into a higher one, or out of or into a room the table
    lacks."""
    floors = floor_of()
    bad = []
    for (source, target), where in sorted(found.items()):
        if source == "__init__.py":  # the package's face re-exports; nothing imports it
            continue
        if source not in floors or target not in floors:
            missing = source if source not in floors else target
            bad.append(f"{missing} is on no floor of FLOORS (tests/helpers/floors.py)")
        elif floors[target] > floors[source]:
            bad.append(f"{source} (floor {floors[source]}) imports {target} (floor "
                       f"{floors[target]}): {'; '.join(where)}")
    return bad


def pairs(found: Dict[Tuple[str, str], List[str]]) -> List[Tuple[str, str]]:
    """Rooms that import each other."""
    return sorted((a, b) for a, b in found if a < b and (b, a) in found)


def picture() -> str:
    """docs/architecture.md's picture of the floors, top floor first."""
    lines = []
    for index in reversed(range(len(FLOORS))):
        for room, holds in FLOORS[index]:
            name = f"paragan_tf/{room}"
            wrapped = textwrap.wrap(holds, 64) or [""]
            lines.append(f" {index}  {name:<28}{wrapped[0]}")
            lines.extend(f"{'':32}{more}" for more in wrapped[1:])
    return "\n".join(lines)


def figures(root: str = REPO) -> dict:
    """The rooms, arrows, arrows back up and pairs of rooms importing each other."""
    found = arrows(root)
    rooms = {room for arrow in found for room in arrow} - {"__init__.py"}
    return dict(rooms=len(rooms), arrows=len(found), arrows_back_up=len(back_up(found)),
                pairs=pairs(found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=REPO, help="a checkout of the repository")
    parser.add_argument("--draw", action="store_true", help="print the picture")
    args = parser.parse_args()
    if args.draw:
        print(picture())
        return
    found = arrows(args.root)
    print(figures(args.root))
    for line in back_up(found):
        print("back up:", line)


if __name__ == "__main__":
    main()
