"""The images' sizes (``make bench``): the full image (the embedded Spark driver) and the thin
one (the Spark Connect client), as built by ``python -m testbed.image build`` or by
tests/image. Reads what is there, builds nothing: an image not built is reported as such.

Prints ``FIGURE<TAB>image_size_mb@<target><TAB>MB`` (podman's size: the layers, uncompressed).
"""

from __future__ import annotations

import shutil
import sys

from testbed.image import TARGETS, image_exists, image_size, image_tag


def main() -> int:
    if shutil.which("podman") is None:
        print("podman is not installed: no image sizes (.ci/setup.sh installs it)")
        return 0
    for target in TARGETS:
        tag = image_tag(target)
        if not image_exists(tag):
            print(f"{tag} ({target}) is not built: python -m testbed.image build (or make test)")
            continue
        size_mb = image_size(tag) / 1e6
        print(f"{tag} ({target}): {size_mb:.0f} MB")
        print(f"FIGURE\timage_size_mb@{target}\t{size_mb:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
