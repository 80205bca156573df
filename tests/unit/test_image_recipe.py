"""testbed.image's recipe, on files: the base is made from the mirror the host's apt uses (both
apt source formats), with the release's update and security suites, and is made again when
anything it is made from changes; podman gets limits no higher than the process has."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from testbed.image import (
    MAX_NOFILE,
    MAX_NPROC,
    AptSource,
    BaseRecipe,
    ImageError,
    apt_sources,
    base_sources,
    debian_mirror,
    host_codename,
    podman_run_options,
)

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example.org/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.example.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://mirror.example.org/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://off.example.org/debian
Suites: bookworm
Components: main
Enabled: no
"""


def apt_tree(tmp_path: Path, sources_list: str = "", files: dict[str, str] | None = None) -> Path:
    root = tmp_path / "apt"
    (root / "sources.list.d").mkdir(parents=True)
    if sources_list:
        (root / "sources.list").write_text(sources_list)
    for name, text in (files or {}).items():
        (root / "sources.list.d" / name).write_text(text)
    return root


def test_the_mirror_is_the_first_source_of_the_release_in_either_format(tmp_path: Path) -> None:
    root = apt_tree(
        tmp_path,
        files={
            "debian.sources": DEB822,
            "vendor.list.disabled-by-farm": "deb https://vendor.example.com/apt stable main\n",
            "zz-other.list": "deb [arch=amd64 signed-by=/k.gpg] https://other.example.com bookworm main\n",
        },
    )
    sources = apt_sources(root)
    assert [s.uri for s in sources] == [
        "http://mirror.example.org/debian",
        "http://security.example.org/debian-security",
        "https://other.example.com",
    ]
    assert sources[2].signed_by == "/k.gpg"
    assert debian_mirror(sources, "bookworm").uri == "http://mirror.example.org/debian"
    one_line = apt_tree(tmp_path / "old", "# main\ndeb http://old.example.org/debian bookworm main\n")
    assert debian_mirror(apt_sources(one_line), "bookworm").uri == "http://old.example.org/debian"
    with pytest.raises(ImageError, match="no apt source of the host serves the suite trixie"):
        debian_mirror(sources, "trixie")


def test_the_base_gets_the_release_its_updates_and_its_security_suites(tmp_path: Path) -> None:
    sources = apt_sources(apt_tree(tmp_path, files={"debian.sources": DEB822}))
    sources.append(AptSource("https://other.example.com", ("stable",), ("main",)))
    assert base_sources(sources, "bookworm") == (
        "Types: deb\nURIs: http://mirror.example.org/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main contrib\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://security.example.org/debian-security\nSuites: bookworm-security\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )


def test_the_release_comes_from_os_release(tmp_path: Path) -> None:
    os_release = tmp_path / "os-release"
    os_release.write_text(
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_CODENAME=bookworm\n'
    )
    assert host_codename(os_release) == "bookworm"
    os_release.write_text("ID=ubuntu\nVERSION_CODENAME=noble\n")
    with pytest.raises(ImageError, match="not a Debian release"):
        host_codename(os_release)


def test_a_base_is_made_again_when_what_it_is_made_from_changes(tmp_path: Path) -> None:
    cert = tmp_path / "proxy.crt"
    cert.write_text("one")
    mirror = AptSource("http://mirror.example.org/debian", ("bookworm",), ("main",))
    recipe = BaseRecipe("bookworm", mirror, "sources", (cert,))
    assert recipe.tag == f"localhost/kte-python-base:bookworm-{recipe.key}"
    assert BaseRecipe("bookworm", mirror, "sources", (cert,)).key == recipe.key
    other_mirror = AptSource("http://other.example.org/debian", ("bookworm",), ("main",))
    assert BaseRecipe("bookworm", other_mirror, "sources", (cert,)).key != recipe.key
    assert BaseRecipe("trixie", mirror, "sources", (cert,)).key != recipe.key
    assert BaseRecipe("bookworm", mirror, "sources", ()).key != recipe.key
    key = recipe.key
    cert.write_text("two")
    assert recipe.key != key


def test_podman_gets_limits_no_higher_than_this_process_has() -> None:
    options = podman_run_options()
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], MAX_NOFILE)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[0], MAX_NPROC)
    assert f"--ulimit=nofile={nofile}:{nofile}" in options
    assert f"--ulimit=nproc={nproc}:{nproc}" in options
    assert "--health-interval=disable" in options
