"""The project's container images, built and run without Docker: Debian's debootstrap, buildah
and podman (what ``tests/image`` runs, and what docs/deploy.md shows).

* :func:`make_base`: a Python base image made locally, in place of ``python:3.11-slim``:
  ``debootstrap --variant=minbase`` of the host's Debian release from the mirror the host's
  apt uses (read from ``/etc/apt/sources.list*``), with python3, pip, venv and
  ``python-is-python3``; Debian's ``EXTERNALLY-MANAGED`` marker removed (the Dockerfile
  installs with pip system-wide); the host's own certificate authorities added (so that pip
  and apt inside trust what the host trusts, e.g. a TLS-inspecting proxy's CA); no apt lists,
  documentation or translations; imported with ``podman import``. The root file system is
  kept as a tarball in the cache, keyed by everything it is made from, so the next run on the
  machine imports it in seconds.
* :func:`build`: ``buildah bud --format docker`` (the Docker format keeps the HEALTHCHECK) of
  one target of the Dockerfile on that base (``--build-arg PYTHON_IMAGE``), with pip's cache
  (the host's own, which the project's virtualenv filled) and apt's package cache mounted, so
  that downloads and pyspark's wheel are reused.
* :func:`podman_run_options`: what ``podman run`` needs on this kind of machine (runc, limits
  it may set, no systemd for health-check timers).

``python -m testbed.image base|build [--target runtime|thin]`` runs them from the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("KTE_CACHE", Path.home() / ".cache" / "kafka-txn-exporter")) / "image"
APT_ROOT = Path("/etc/apt")
#: What the Dockerfile expects of PYTHON_IMAGE: python and pip on PATH, venv, apt, useradd.
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "python-is-python3", "ca-certificates")
#: Changes whenever the recipe below changes, so a cached base of another recipe is not reused.
BASE_RECIPE = "3"
BASE_REPOSITORY = "localhost/kte-python-base"
IMAGE_REPOSITORY = "localhost/kafka-txn-exporter"
TARGETS = ("runtime", "thin")
#: dpkg leaves documentation, manual pages and translations out of the base and of every image
#: built on it (the JRE too), as Debian's own container images do.
DPKG_EXCLUDES = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
"""
ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Upper bounds of the limits podman asks runc to set: the VMs of this kind refuse to raise a
#: limit (podman's defaults, nofile 1048576, fail), and refuse nproc above 32768.
MAX_NOFILE = 65536
MAX_NPROC = 4096

Log = Callable[[str], None]


class ImageError(RuntimeError):
    """A step of making or building an image failed; the message says which and why."""


@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None = None


def host_codename(os_release: Path = Path("/etc/os-release")) -> str:
    """The host's Debian release (``VERSION_CODENAME``), e.g. bookworm."""
    fields = dict(
        line.split("=", 1) for line in os_release.read_text().splitlines() if "=" in line and line[0] != "#"
    )
    codename = fields.get("VERSION_CODENAME", "").strip('"')
    if fields.get("ID", "").strip('"') != "debian" or not codename:
        raise ImageError(f"{os_release}: not a Debian release with a VERSION_CODENAME")
    return codename


def apt_sources(root: Path = APT_ROOT) -> list[AptSource]:
    """The host's ``deb`` sources, in apt's order: ``sources.list``, then ``sources.list.d``'s
    ``*.list`` (one-line format) and ``*.sources`` (deb822) files by name. Other files there
    (``*.disabled`` ...) are not apt's."""
    found: list[AptSource] = []
    files = [root / "sources.list", *sorted((root / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        if path.name == "sources.list" or path.suffix == ".list":
            found += _one_line_sources(path.read_text())
        elif path.suffix == ".sources":
            found += _deb822_sources(path.read_text())
    return found


def _one_line_sources(text: str) -> list[AptSource]:
    found = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        words = line.split()[1:]
        options: dict[str, str] = {}
        if words and words[0].startswith("["):
            option_words = []
            while words:
                word = words.pop(0)
                option_words.append(word.strip("[]"))
                if word.endswith("]"):
                    break
            options = dict(w.split("=", 1) for w in option_words if "=" in w)
        if len(words) >= 2:
            found.append(AptSource(words[0], (words[1],), tuple(words[2:]), options.get("signed-by")))
    return found


def _deb822_sources(text: str) -> list[AptSource]:
    found = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for raw in stanza.splitlines():
            if raw.startswith("#") or not raw.strip():
                continue
            if raw[0] in " \t" and key:
                fields[key] += " " + raw.strip()
                continue
            key, _, value = raw.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            found.append(
                AptSource(
                    uri,
                    tuple(fields.get("suites", "").split()),
                    tuple(fields.get("components", "").split()),
                    fields.get("signed-by") or None,
                )
            )
    return found


def debian_mirror(sources: Sequence[AptSource], codename: str) -> AptSource:
    """The source the host installs its release from: the first one with the release's own
    suite (not its -updates or -security suites)."""
    for source in sources:
        if codename in source.suites:
            return source
    raise ImageError(f"no apt source of the host serves the suite {codename} (/etc/apt/sources.list*)")


def base_sources(sources: Sequence[AptSource], codename: str) -> str:
    """The base's ``/etc/apt/sources.list.d/debian.sources``: the host's sources of the
    release's suites (itself, -updates, -security), so that apt-get in the Dockerfile installs
    from the same mirrors, security updates included."""
    wanted = {codename, f"{codename}-updates", f"{codename}-security"}
    stanzas = []
    for source in sources:
        suites = [s for s in source.suites if s in wanted]
        if not suites:
            continue
        lines = ["Types: deb", f"URIs: {source.uri}", f"Suites: {' '.join(suites)}"]
        lines.append(f"Components: {' '.join(source.components) or 'main'}")
        if source.signed_by and "\n" not in source.signed_by:
            lines.append(f"Signed-By: {source.signed_by}")
        stanzas.append("\n".join(lines))
    return "\n\n".join(stanzas) + "\n"


def host_certificates(root: Path = Path("/usr/local/share/ca-certificates")) -> list[Path]:
    """The certificate authorities the host added to Debian's (``update-ca-certificates``)."""
    return sorted(p for p in root.rglob("*.crt") if p.is_file()) if root.is_dir() else []


@dataclass(frozen=True)
class BaseRecipe:
    codename: str
    mirror: AptSource
    sources: str
    certificates: tuple[Path, ...]

    @property
    def key(self) -> str:
        digest = hashlib.sha256()
        for part in (BASE_RECIPE, self.codename, self.mirror.uri, ",".join(BASE_PACKAGES), self.sources):
            digest.update(part.encode() + b"\0")
        digest.update(DPKG_EXCLUDES.encode())
        for cert in self.certificates:
            digest.update(cert.name.encode() + b"\0" + cert.read_bytes())
        return digest.hexdigest()[:12]

    @property
    def tag(self) -> str:
        return f"{BASE_REPOSITORY}:{self.codename}-{self.key}"


def host_recipe() -> BaseRecipe:
    codename = host_codename()
    sources = apt_sources()
    return BaseRecipe(
        codename,
        debian_mirror(sources, codename),
        base_sources(sources, codename),
        tuple(host_certificates()),
    )


def run(
    command: Sequence[str], log: Log, *, timeout_s: float, show: Callable[[str], bool] | None = None
) -> str:
    """Run ``command``, its output returned; the lines ``show`` picks go to ``log`` as they
    come. ImageError with the last lines when it fails or outlives ``timeout_s``."""
    log("$ " + " ".join(command))
    started = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    ) as proc:
        timer = threading.Timer(timeout_s, _kill_group, args=(proc.pid,))
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if show is not None and show(lines[-1]):
                    shown = lines[-1] if len(lines[-1]) <= 160 else lines[-1][:157] + "..."
                    log(f"  [{time.monotonic() - started:4.0f} s] {shown}")
            code = proc.wait()
        finally:
            timer.cancel()
    if time.monotonic() - started >= timeout_s:
        raise ImageError(f"{command[0]} did not finish within {timeout_s:.0f} s")
    if code != 0:
        tail = "\n".join(lines[-40:])
        raise ImageError(f"{' '.join(command[:3])} ... exited with {code}:\n{tail}")
    return "\n".join(lines)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """One maker of a cached file at a time on this machine (concurrent runs wait)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def image_exists(tag: str) -> bool:
    return subprocess.run(["podman", "image", "exists", tag], check=False, timeout=60).returncode == 0


def make_base(log: Log, *, recipe: BaseRecipe | None = None, timeout_s: float = 1200) -> str:
    """The base image's tag, made (or imported from the cached root file system) when missing."""
    recipe = recipe or host_recipe()
    if image_exists(recipe.tag):
        log(f"base image {recipe.tag}: present")
        return recipe.tag
    tarball = CACHE / f"base-{recipe.codename}-{recipe.key}.tar"
    with _locked("base"):
        if not tarball.exists():
            _make_root_tarball(recipe, tarball, log, timeout_s)
            for stale in CACHE.glob("base-*.tar"):  # bases of other recipes: not used again
                if stale != tarball:
                    stale.unlink()
        else:
            log(f"base root file system: cached {tarball}")
        run(
            [
                "podman",
                "import",
                "--change",
                f"ENV PATH={ENV_PATH}",
                "--change",
                "ENV LANG=C.UTF-8",
                "--change",
                'CMD ["python3"]',
                str(tarball),
                recipe.tag,
            ],
            log,
            timeout_s=600,
        )
    return recipe.tag


def _make_root_tarball(recipe: BaseRecipe, tarball: Path, log: Log, timeout_s: float) -> None:
    started = time.monotonic()
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="base-") as work:
        root = Path(work) / "rootfs"
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}"]
        keyring = recipe.mirror.signed_by
        if keyring and Path(keyring).is_file():
            command.append(f"--keyring={keyring}")
        run([*command, recipe.codename, str(root), recipe.mirror.uri], log, timeout_s=timeout_s)
        (root / "etc/dpkg/dpkg.cfg.d/kte-excludes").write_text(DPKG_EXCLUDES)
        (root / "etc/apt/sources.list").unlink(missing_ok=True)
        (root / "etc/apt/sources.list.d/debian.sources").write_text(recipe.sources)
        for cert in recipe.certificates:
            shutil.copy2(cert, root / "usr/local/share/ca-certificates" / cert.name)
        run(["chroot", str(root), "update-ca-certificates"], log, timeout_s=300)
        for marker in (root / "usr/lib").glob("python3*/EXTERNALLY-MANAGED"):
            marker.unlink()
        run(["chroot", str(root), "apt-get", "clean"], log, timeout_s=300)
        _prune(root)
        partial = tarball.with_suffix(".tar.partial")
        run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."], log, timeout_s=600)
        partial.rename(tarball)
    log(f"base root file system made in {time.monotonic() - started:.0f} s: {tarball}")


def _prune(root: Path) -> None:
    """What the base needs at no point: apt's lists (the Dockerfile updates them), what dpkg
    excludes from now on, device nodes (the runtime makes /dev), temporary files."""
    for pattern in ("var/lib/apt/lists/*", "var/cache/apt/*.bin", "dev/*", "tmp/*", "var/log/*.log"):
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    for top in ("usr/share/man", "usr/share/info", "usr/share/lintian"):
        for path in (root / top).glob("*"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for path in (root / "usr/share/locale").glob("*"):
        if path.name != "locale.alias":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for path in sorted((root / "usr/share/doc").rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):
                path.rmdir()  # empty once its files are gone
        elif path.name != "copyright":
            path.unlink()


def image_tag(target: str) -> str:
    from exporter import __version__

    return f"{IMAGE_REPOSITORY}:{__version__}" + ("" if target == "runtime" else f"-{target}")


def pip_cache_dir() -> Path:
    """pip's cache of the project's virtualenv (``.ci/setup.sh`` filled it: pyspark's wheel
    is there), else one of the image cache's own."""
    pip = Path(sys.executable).with_name("pip")
    if pip.exists():
        done = subprocess.run(
            [str(pip), "cache", "dir"], capture_output=True, text=True, check=False, timeout=60
        )
        if done.returncode == 0 and done.stdout.strip():
            return Path(done.stdout.strip())
    return CACHE / "pip"


def build_command(target: str, base: str, tag: str) -> list[str]:
    """The ``buildah bud`` of ``target`` on ``base``: the Docker format (HEALTHCHECK), chroot
    isolation (no namespaces or cgroups needed; the build's steps run as root on the host's
    network), pip's and apt's caches mounted."""
    pip_cache = pip_cache_dir()
    # One per target: apt locks its package cache, and the two targets may build at once.
    apt_cache = CACHE / "apt" / target
    for directory in (pip_cache, apt_cache):
        directory.mkdir(parents=True, exist_ok=True)
    return [
        "buildah",
        "bud",
        "--format",
        "docker",
        "--isolation",
        "chroot",
        "--build-arg",
        f"PYTHON_IMAGE={base}",
        "--target",
        target,
        "--volume",
        f"{pip_cache}:/root/.cache/pip",
        "--volume",
        f"{apt_cache}:/var/cache/apt/archives",
        "--tag",
        tag,
        str(REPO),
    ]


@dataclass(frozen=True)
class Built:
    target: str
    tag: str
    seconds: float
    size_bytes: int
    #: The image of the same sources, base and target was there already (not built again).
    reused: bool = False


#: The build context the Dockerfile sees (.dockerignore allows these), and the Dockerfile.
CONTEXT = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "LICENSE", "exporter")
BUILD_KEY_LABEL = "org.kafka-txn-exporter.build-key"


def build_key(target: str, base: str) -> str:
    """What an image is built from: the target, the base and every file of the context."""
    digest = hashlib.sha256(f"{target}\0{base}\0".encode())
    for top in CONTEXT:
        path = REPO / top
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts or file.suffix == ".pyc" or not file.exists():
                continue
            digest.update(str(file.relative_to(REPO)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def image_id(tag: str) -> str | None:
    done = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def image_label(tag: str, label: str) -> str | None:
    done = subprocess.run(
        ["podman", "image", "inspect", "--format", f'{{{{index .Labels "{label}"}}}}', tag],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    value = done.stdout.strip()
    return value if done.returncode == 0 and value and value != "<no value>" else None


def build(target: str, base: str, log: Log, *, timeout_s: float = 2400) -> Built:
    """Build ``target`` of the Dockerfile on ``base`` (buildah's step lines go to ``log``),
    unless the image of the same sources, base and target is there from an earlier run."""
    tag = image_tag(target)
    key = build_key(target, base)
    if image_label(tag, BUILD_KEY_LABEL) == key:
        log(f"{tag} ({target}): built earlier from the same sources and base, not built again")
        return Built(target, tag, 0.0, image_size(tag), reused=True)
    command = build_command(target, base, tag)
    command[-1:-1] = ["--label", f"{BUILD_KEY_LABEL}={key}"]
    replaced = image_id(tag)
    started = time.monotonic()
    run(command, log, timeout_s=timeout_s, show=_build_step)
    if replaced is not None and replaced != image_id(tag):
        # The image this build replaced, untagged now: gigabytes a run on a CI machine.
        subprocess.run(["podman", "rmi", replaced], capture_output=True, check=False, timeout=300)
    built = Built(target, tag, time.monotonic() - started, image_size(tag))
    log(f"built {tag} ({target}) in {built.seconds:.0f} s: {built.size_bytes / 1e6:.0f} MB")
    return built


def _build_step(line: str) -> bool:
    """buildah's lines that tell the build's progress: its steps and commits."""
    return re.match(r"^\[\d+/\d+\] STEP |^STEP |^COMMIT ", line) is not None


def image_size(tag: str) -> int:
    """The image's size as podman counts it (its layers, uncompressed), in bytes."""
    done = subprocess.run(
        ["podman", "image", "inspect", tag], capture_output=True, text=True, check=True, timeout=60
    )
    size: int = json.loads(done.stdout)[0]["Size"]
    return size


def podman_run_options() -> list[str]:
    """``podman run`` options this kind of machine needs: runc (when installed), explicit
    limits no higher than the ones this process has (the VM refuses to raise a limit), and no
    health-check timer (they need systemd; ``podman healthcheck run`` still runs the check)."""
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], MAX_NOFILE)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[0], MAX_NPROC)
    options = [
        "--health-interval=disable",
        f"--ulimit=nofile={nofile}:{nofile}",
        f"--ulimit=nproc={nproc}:{nproc}",
    ]
    if shutil.which("runc"):
        options.insert(0, "--runtime=runc")
    return options


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.image", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("base", help="make the Debian base image (cached)")
    build_cmd = sub.add_parser("build", help="build the images on the base")
    build_cmd.add_argument("--target", choices=[*TARGETS, "all"], default="all")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        print(line, flush=True)

    try:
        base = make_base(log)
        if args.command == "build":
            for target in TARGETS if args.target == "all" else (args.target,):
                build(target, base, log)
    except ImageError as e:
        print(f"image: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
