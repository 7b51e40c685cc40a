"""What counts as data in a folder or zip of images (data/image_files.py): classes, images,
and every entry skipped counted by kind; a zip's wrapping folder; greyscale detection."""

from __future__ import annotations

import zipfile

from paragan_tf.data import image_files

ENTRIES = [  # (path, is_dir) as folder_entries and zip_entries give them, in no order
    ("dog", True), ("cat", True), (".ipynb_checkpoints", True), ("notes.txt", False),
    ("cat/1.png", False), ("cat/0.JPG", False), ("cat/.DS_Store", False), ("cat/raw", True),
    ("cat/raw/2.png", False), ("dog/a.webp", False), ("dog/b.bmp", False),
    ("dog/labels.csv", False), (".ipynb_checkpoints/x.png", False)]


def test_classes_images_and_every_skipped_entry_by_kind():
    listing = image_files.list_tree(ENTRIES, image_files.TF_EXTENSIONS)
    assert listing.classes == ["cat", "dog"]
    assert listing.files == ["cat/0.JPG", "cat/1.png", "dog/b.bmp"]
    assert listing.labels == [0, 0, 1]
    assert listing.skipped_line() == (
        "skipped 2 hidden (.ipynb_checkpoints, cat/.DS_Store); 1 nested folder (cat/raw); "
        "2 not an image (dog/a.webp, dog/labels.csv); 1 outside a class folder (notes.txt)")
    # The dataset tool reads with Pillow, which also reads WebP.
    assert image_files.list_tree(ENTRIES, image_files.PIL_EXTENSIONS).files == [
        "cat/0.JPG", "cat/1.png", "dog/a.webp", "dog/b.bmp"]
    assert image_files.list_tree([("cat", True), ("cat/0.png", False)],
                                 image_files.TF_EXTENSIONS).skipped_line() == ""


def test_a_zip_is_entered_through_its_one_wrapping_folder(tmp_path):
    wrapped = tmp_path / "wrapped.zip"
    with zipfile.ZipFile(wrapped, "w") as archive:  # as macOS's Finder makes them
        for name in ("digits/a/0.png", "digits/b/1.png", "__MACOSX/digits/a/._0.png"):
            archive.writestr(name, b"")
    entries, prefix = image_files.zip_entries(str(wrapped))
    assert prefix == "digits/"
    listing = image_files.list_tree(entries, image_files.PIL_EXTENSIONS)
    assert (listing.classes, listing.files) == (["a", "b"], ["a/0.png", "b/1.png"])
    # A folder with images directly inside is the one class of a one-class dataset.
    single = tmp_path / "single.zip"
    with zipfile.ZipFile(single, "w") as archive:
        archive.writestr("cats/0.png", b"")
    entries, prefix = image_files.zip_entries(str(single))
    assert prefix == "" and image_files.list_tree(
        entries, image_files.PIL_EXTENSIONS).classes == ["cats"]


def test_one_channel_only_when_every_readable_image_looked_at_is_grey():
    modes = {"grey": "L", "grey_alpha": "LA", "colour": "RGB", "broken": None}

    def mode_of(path):
        if modes[path] is None:
            raise OSError(f"cannot identify image file {path!r}")
        return modes[path]
    assert image_files.detect_channels(["grey", "broken", "grey_alpha"], mode_of) == (1, 2)
    assert image_files.detect_channels(["grey", "colour"], mode_of) == (3, 2)
    assert image_files.detect_channels([], mode_of) == (3, 0)
    # An even spread, not the first ones: 3 looked at of 100, the colour one last.
    assert image_files.detect_channels(["grey"] * 99 + ["colour"], mode_of, sample=3) == (3, 3)
