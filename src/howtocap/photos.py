"""Real photographs that ship inside installed packages, for generated sample videos:
scikit-image's 17 or so are too few for benchmarks that hold out whole photographs. Plain files
of packages installed here or one Debian package away, never a download: ``skimage:<name>``,
``sklearn:china``/``flower``, ``matplotlib:grace_hopper`` and the real photographs (not the
drawings, calibration boards or logos) of ``opencv-doc``'s examples (``opencv:<name>``;
``apt-get install opencv-doc``)."""

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
        found = [p for ext in _IMAGE_EXT if (p := OPENCV_DOC / "data" / f"{name}{ext}").is_file()]
        if found:
            out[f"opencv:{name}"] = found[0]
    plant = OPENCV_DOC / "alphamat" / "input_images" / "plant.jpg"
    if plant.is_file():
        out["opencv:plant"] = plant
    return dict(sorted(out.items()))
