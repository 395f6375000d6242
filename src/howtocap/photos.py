"""Real photographs that ship inside installed packages, for generated sample videos.
scikit-image ships about 17 usable photographs; benchmarks that hold out whole photographs
(train on some, evaluate on others) need more. These sources are plain files of packages
already installed here or one Debian package away, never a download:
* scikit-image ``skimage/data`` (``skimage:<name>``),
* scikit-learn's sample images ``sklearn/datasets/images`` (``sklearn:china``, ``sklearn:flower``),
* matplotlib's ``sample_data`` (``matplotlib:grace_hopper``),
* Debian's ``opencv-doc`` examples ``/usr/share/doc/opencv-doc/examples/data``
  (``opencv:<name>``; ``apt-get install opencv-doc``), only its real photographs (the drawings,
  calibration boards and logos are left out)."""

from __future__ import annotations

from pathlib import Path

from howtocap.bundled import package_dir

OPENCV_DOC = Path("/usr/share/doc/opencv-doc/examples")
# opencv-doc photographs of real scenes or objects (the rest are drawings, charts, boards)
OPENCV_PHOTOS = ("apple", "baboon", "building", "butterfly", "fruits", "home", "leuvenA",
                 "messi5", "orange", "smarties", "squirrel_cls", "starry_night", "aloeL",
                 "lena", "board")
_IMAGE_EXT = (".png", ".jpg", ".jpeg")


def packaged_photos() -> dict[str, Path]:
    """``source:name`` -> image file, for every source that is installed (sorted by name)."""
    out: dict[str, Path] = {}
    sk = package_dir("skimage")
    if sk is not None and (sk / "data").is_dir():
        out.update({f"skimage:{p.stem}": p for p in (sk / "data").iterdir()
                    if p.suffix in _IMAGE_EXT})
    if (sl := package_dir("sklearn")) is not None:
        out.update({f"sklearn:{p.stem}": p
                    for p in sorted((sl / "datasets" / "images").glob("*.jpg"))})
    mpl = package_dir("matplotlib")
    if mpl is not None:
        p = mpl / "mpl-data" / "sample_data" / "grace_hopper.jpg"
        if p.is_file():
            out["matplotlib:grace_hopper"] = p
    for name in OPENCV_PHOTOS:
        for ext in _IMAGE_EXT:
            p = OPENCV_DOC / "data" / f"{name}{ext}"
            if p.is_file():
                out[f"opencv:{name}"] = p
                break
    plant = OPENCV_DOC / "alphamat" / "input_images" / "plant.jpg"
    if plant.is_file():
        out["opencv:plant"] = plant
    return dict(sorted(out.items()))
