"""The dataset tool's images (data/prepare.py): read from the source, made the stored square.

A folder's or a zip's members are opened by name and decoded with Pillow (any format
it reads); a TFDS split is read by its slice. Each image is then brought to the
chosen resolution by the policy (EXIF orientation applied, transparency composited
on black, 1 or 3 channels) and encoded as PNG or JPEG. prepare.py plans the shards
and runs the workers; this module is what a worker does to one image, and what the
plan peeks at (an image's mode) to count the channels.
"""

from __future__ import annotations

import io
import os
import zipfile
from typing import Callable, Iterator, Optional, Tuple


def member_opener(kind: str, root: str) -> Callable[[str], io.BytesIO]:
    """Opens a member of a folder or a zip (`kind`) by its name, as a binary file."""
    if kind == "folder":
        return lambda member: open(os.path.join(root, member), "rb")
    archive = zipfile.ZipFile(root)  # one per process: ZipFile objects are not shared
    return lambda member: io.BytesIO(archive.read(member))


def image_mode(opener, member: str) -> str:
    from PIL import Image  # pylint: disable=import-outside-toplevel
    with opener(member) as f, Image.open(f) as image:
        return image.mode


def read_images(kind: str, root: str, items: Tuple, split: str,
                tfds_data_dir: Optional[str]) -> Iterator[tuple]:
    """(name, label, Pillow image or the exception that stopped it) of a shard's `items`:
    ((member, label), ...) of a folder or zip, (start, stop) of the TFDS split `split`."""
    from PIL import Image  # pylint: disable=import-outside-toplevel
    if kind == "tfds":
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
        start, stop = items
        ds = tfds.load(root, split=f"{split}[{start}:{stop}]",
                       data_dir=tfds_data_dir, shuffle_files=False)
        for i, ex in enumerate(tfds.as_numpy(ds)):
            array = ex["image"]
            yield (f"{root}/{split}[{start + i}]", int(ex["label"]),
                   Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array))
        return
    opener = member_opener(kind, root)
    for member, label in items:
        try:
            with opener(member) as f:
                image = Image.open(f)
                image.load()  # decode now: a corrupt file fails here, not later
            yield member, label, image
        except Exception as e:  # pylint: disable=broad-except  # any decoder error
            yield member, label, e


def fit(image, resolution: int, policy: str, channels: int):
    """A Pillow image of any size, mode and orientation -> `resolution`^2, 1 or 3 channels."""
    from PIL import Image, ImageOps  # pylint: disable=import-outside-toplevel
    image = ImageOps.exif_transpose(image)
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (0, 0, 0, 255)), rgba)
    image = image.convert("L" if channels == 1 else "RGB")
    w, h = image.size
    if policy == "center_crop":
        side = min(w, h)
        left, top = (w - side) // 2, (h - side) // 2
        image = image.crop((left, top, left + side, top + side))
        return image.resize((resolution, resolution), Image.LANCZOS)
    if policy == "resize":
        return image.resize((resolution, resolution), Image.LANCZOS)
    scale = resolution / max(w, h)
    inner = image.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.LANCZOS)
    canvas = Image.new(image.mode, (resolution, resolution), 0)
    canvas.paste(inner, ((resolution - inner.size[0]) // 2, (resolution - inner.size[1]) // 2))
    return canvas


class NotAPair(ValueError):
    """An image of odd width where a pair was expected."""


def fit_pair(image, resolution: int, policy: str, channels: int):
    """An input|target pair side by side (data/paired.py) -> each half fitted alone, side by
    side again: `resolution` x 2 `resolution`. NotAPair when the width is odd."""
    from PIL import Image  # pylint: disable=import-outside-toplevel
    w, h = image.size
    if w % 2:
        raise NotAPair(f"{w} x {h}: a pair is its input and target side by side, of even "
                       f"width")
    halves = [fit(image.crop((left, 0, left + w // 2, h)), resolution, policy, channels)
              for left in (0, w // 2)]
    pair = Image.new(halves[0].mode, (2 * resolution, resolution))
    for i, half in enumerate(halves):
        pair.paste(half, (i * resolution, 0))
    return pair


def encode(image, encoding: str) -> bytes:
    out = io.BytesIO()
    if encoding == "png":
        image.save(out, format="PNG")
    else:
        image.save(out, format="JPEG", quality=95)
    return out.getvalue()
