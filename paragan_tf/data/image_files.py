"""What counts as data in a folder (or zip) of images: the rules, stated once.

A dataset is `<root>/<class name>/<image file>`:
  - classes are the visible sub-folders of the root, sorted by name; label i is
    the i-th name. Hidden entries (a leading '.', e.g. a notebook's
    `.ipynb_checkpoints`, macOS's `.DS_Store`) are never classes or images;
  - images are the visible files of a class folder whose extension is one of the
    reader's formats; anything else (text files, nested folders, files at the
    root) is skipped;
  - every skipped entry is counted by kind, and the caller logs the counts:
    nothing is dropped silently.
The image_folder source (TensorFlow's decoders) and the dataset tool
(bin/prepare_dataset.py, Pillow's decoders) read different formats; each passes
its own extensions.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import zipfile
from typing import Callable, Dict, Iterable, List, Sequence, Tuple

# What TensorFlow's decode_image reads (the image_folder source).
TF_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")
# What Pillow reads (the dataset tool).
PIL_EXTENSIONS = TF_EXTENSIONS + (".webp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm", ".tga")
# Pillow modes that carry no colour.
_GREY_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F")


@dataclasses.dataclass
class Listing:
    """The images of a dataset tree: relative paths `class/file`, their labels, what was skipped."""

    classes: List[str]
    files: List[str]
    labels: List[int]
    skipped: Dict[str, int]  # kind ('hidden', 'not an image', 'nested folder', ...) -> count
    skipped_examples: Dict[str, List[str]]  # kind -> up to 5 names, for the log

    def skipped_line(self) -> str:
        """'' when nothing was skipped, else one line naming the counts and a few examples."""
        parts = [f"{n} {kind} ({', '.join(self.skipped_examples[kind])}"
                 f"{', ...' if n > len(self.skipped_examples[kind]) else ''})"
                 for kind, n in sorted(self.skipped.items()) if n]
        return "skipped " + "; ".join(parts) if parts else ""


def _hidden(name: str) -> bool:
    return name.startswith(".") or name.startswith("__MACOSX")


def list_tree(entries: Iterable[Tuple[str, bool]], extensions: Sequence[str]) -> Listing:
    """Applies the rules to (relative path with '/', is_dir) entries of a tree."""
    skipped = collections.Counter()
    examples: Dict[str, List[str]] = collections.defaultdict(list)

    def skip(kind, path):
        skipped[kind] += 1
        if len(examples[kind]) < 5:
            examples[kind].append(path)

    per_class: Dict[str, List[str]] = {}
    entries = sorted(entries)
    for path, is_dir in entries:  # depth 1: the class folders
        if "/" in path:
            continue
        if _hidden(path):
            skip("hidden", path)
        elif is_dir:
            per_class[path] = []
        else:
            skip("outside a class folder", path)
    for path, is_dir in entries:  # depth 2: a class's entries (deeper ones go with their folder)
        parts = path.split("/")
        if len(parts) != 2 or parts[0] not in per_class:
            continue
        if _hidden(parts[1]):
            skip("hidden", path)
        elif is_dir:
            skip("nested folder", path)
        elif os.path.splitext(parts[1])[1].lower() in extensions:
            per_class[parts[0]].append(path)
        else:
            skip("not an image", path)
    classes = sorted(per_class)
    files, labels = [], []
    for label, cls in enumerate(classes):
        files.extend(per_class[cls])
        labels.extend([label] * len(per_class[cls]))
    return Listing(classes, files, labels, dict(skipped), dict(examples))


def folder_entries(root: str) -> List[Tuple[str, bool]]:
    """(relative path, is_dir) of the root's entries and of its visible folders' entries."""
    out = []
    with os.scandir(root) as top:
        for entry in top:
            is_dir = entry.is_dir()
            out.append((entry.name, is_dir))
            if is_dir and not _hidden(entry.name):
                with os.scandir(entry.path) as inner:
                    out.extend((f"{entry.name}/{sub.name}", sub.is_dir()) for sub in inner)
    return out


def zip_entries(path: str) -> Tuple[List[Tuple[str, bool]], str]:
    """(entries, prefix) of a zip: a single top-level folder holding the class folders
    (how most archives are made) is stepped into; prefix is that folder's name + '/'."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    files = [n for n in names if not n.endswith("/")]
    dirs = {n.rstrip("/") for n in names if n.endswith("/")}
    for name in files:  # zips need not list their folders
        parts = name.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    prefix = ""
    while True:
        children = {p[len(prefix):].split("/")[0] for p in dirs.union(files)
                    if p.startswith(prefix) and len(p) > len(prefix)}
        visible = [c for c in children if not _hidden(c)]
        if len(visible) != 1 or prefix + visible[0] not in dirs:
            break
        wrapper = prefix + visible[0] + "/"
        if any(f.startswith(wrapper) and "/" not in f[len(wrapper):] for f in files):
            break  # images directly inside: the one class of a one-class dataset
        prefix = wrapper
    entries = [(d[len(prefix):], True) for d in dirs if d.startswith(prefix)]
    entries += [(f[len(prefix):], False) for f in files if f.startswith(prefix)]
    return entries, prefix


def is_grey(mode: str) -> bool:
    return mode in _GREY_MODES


def detect_channels(paths: Sequence[str], mode_of: Callable[[str], str],
                    sample: int = 64) -> Tuple[int, int]:
    """(channels, images looked at): 1 when every image of an evenly spread sample is
    greyscale (Pillow's mode, read from the header), else 3; unreadable ones are left out."""
    if not paths:
        return 3, 0
    picks = sorted({int(i) for i in
                    [k * (len(paths) - 1) / max(1, sample - 1) for k in range(sample)]})
    modes = []
    for i in picks:
        try:
            modes.append(mode_of(paths[i]))
        except Exception:  # pylint: disable=broad-except  # corrupt: the reader reports it
            continue
    if modes and all(is_grey(m) for m in modes):
        return 1, len(modes)
    return 3, len(modes)


def pil_mode(path: str) -> str:
    """An image file's Pillow mode, from its header only."""
    from PIL import Image  # pylint: disable=import-outside-toplevel
    with Image.open(path) as image:
        return image.mode
