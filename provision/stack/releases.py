"""Which SGLang release a host gets: the table of releases and the choice for ``sglang_version: auto``.

Each SGLang release pins ONE torch (``Requires-Dist: torch==X``) and the kernels built against it
(sglang-kernel, flashinfer-python), plus transformers and xgrammar. A host whose venv uses an existing torch
(a GPU image's torch seen through ``venv_system_site_packages``, or a plain venv provision did not build)
must get a release that pins THAT torch, or the install replaces it (a 6 GB download that an air-gapped host
cannot make, and a torch the image's other software was not built for). So:

* ``sglang_version: auto`` picks the newest release in :data:`RELEASES` whose torch pin equals the host's
  torch (its public version: ``2.11.0+cu130`` is ``2.11.0``); with no torch on the host it keeps the pinned
  default (:data:`DEFAULT`, ``defaults.yml``'s ``sglang_version``);
* a version set by hand whose torch pin differs from the host's torch is refused with one line, unless
  ``sglang_allow_torch_change: true``.

The columns from SGLang's own metadata (torch, sglang-kernel, flashinfer-python, transformers, xgrammar,
apache-tvm-ffi) are checked against a snapshot of the releases' METADATA by ``tests/unit/test_releases.py``;
``scripts/refresh_sglang_releases.py`` downloads the wheels again (pip, ``--no-deps``) and rewrites or
compares that snapshot. tokenizers is the newest tested version inside transformers' own range; sglang-router
and nixl are not pinned by SGLang (the router speaks HTTP to the servers; NIXL's KV protocol is SGLang's):
their versions are the ones that ran (``verified``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT = "0.5.23"  # defaults.yml's sglang_version: the release for a fresh venv with no torch of the host's


@dataclass(frozen=True)
class Release:
    sglang: str
    torch: str  # Requires-Dist: torch==X
    kernel: str  # sglang-kernel==X (its own package name since 0.5.x)
    flashinfer: str  # flashinfer-python==X
    transformers: str
    tokenizers: str  # within transformers' range
    xgrammar: str
    tvm_ffi: str  # apache-tvm-ffi: a pin, or the lowest version of SGLang's range
    router: str = "0.3.2"  # sglang-router
    nixl: str = "1.5.1"
    manylinux: str = "manylinux_2_34"  # the oldest glibc tag SGLang publishes wheels for (0.5.11 on)
    verified: tuple[str, ...] = field(default=())  # where this exact set served through provision

    def pins(self) -> dict[str, str]:
        """SGLang's own pinned companions: name -> version (what the host's venv must hold with it)."""
        return {
            "sglang": self.sglang,
            "sglang-kernel": self.kernel,
            "flashinfer-python": self.flashinfer,
            "transformers": self.transformers,
            "tokenizers": self.tokenizers,
            "xgrammar": self.xgrammar,
            "apache-tvm-ffi": self.tvm_ffi,
        }


def _r(sglang: str, torch: str, kernel: str, flashinfer: str, transformers: str, xgrammar: str, tvm: str,
       tokenizers: str = "0.22.2", **kw: object) -> Release:  # fmt: skip
    return Release(sglang, torch, kernel, flashinfer, transformers, tokenizers, xgrammar, tvm, **kw)  # type: ignore[arg-type]


# Newest first. From each release's METADATA (see the module docstring); `verified` says where it served.
RELEASES: tuple[Release, ...] = (
    _r("0.5.23", "2.14.1", "0.4.10", "0.7.2", "5.19.0", "0.2.7", "0.1.11", "0.23.2", verified=("cpu-lab",)),
    _r("0.5.22", "2.14.1", "0.4.9", "0.7.1", "5.19.0", "0.2.7", "0.1.11", "0.23.2"),
    _r("0.5.21", "2.13.0", "0.4.7", "0.6.18", "5.12.1", "0.2.7", "0.1.11"),
    _r("0.5.20", "2.13.0", "0.4.7", "0.6.18", "5.12.1", "0.2.1", "0.1.11"),
    _r("0.5.19", "2.13.0", "0.4.6.post1", "0.6.18", "5.12.1", "0.2.1", "0.1.11"),
    _r("0.5.18", "2.13.0", "0.4.6.post1", "0.6.17", "5.12.1", "0.2.1", "0.1.11"),
    _r("0.5.17", "2.11.0", "0.4.5", "0.6.15.post1", "5.12.1", "0.2.1", "0.1.11", verified=("h200",)),
    _r("0.5.16", "2.11.0", "0.4.5", "0.6.14", "5.12.1", "0.2.1", "0.1.11"),
    _r("0.5.15", "2.11.0", "0.4.4", "0.6.12", "5.12.1", "0.2.1", "0.1.11"),
    _r("0.5.14", "2.11.0", "0.4.4", "0.6.12", "5.8.1", "0.2.1", "0.1.9"),
    _r("0.5.13", "2.11.0", "0.4.3", "0.6.12", "5.8.1", "0.2.1", "0.1.9"),
    _r("0.5.12", "2.11.0", "0.4.2.post2", "0.6.11.post1", "5.6.0", "0.2.0", "0.1.9"),
    _r("0.5.11", "2.11.0", "0.4.2", "0.6.8.post1", "5.6.0", "0.1.32", "0.1.5"),
    _r("0.5.10", "2.9.1", "0.4.1", "0.6.7.post2", "5.3.0", "0.1.32", "0.1.5", manylinux="manylinux_2_17"),
)
BY_VERSION = {r.sglang: r for r in RELEASES}


def public(version: str | None) -> str | None:
    """``2.11.0+cu130`` -> ``2.11.0`` (a local build tag does not change what the pin means)."""
    return version.split("+", 1)[0].strip() if version else None


@dataclass(frozen=True)
class Choice:
    release: Release | None  # None: a version outside the table (set by hand), installed as asked
    version: str
    reason: str


class TorchMismatch(ValueError):
    """The release asked for would replace the host's torch."""


def choose(setting: str, host_torch: str | None, *, allow_torch_change: bool = False, default: str = DEFAULT) -> Choice:
    """The SGLang release for a host. ``setting`` is ``sglang_version`` (``auto`` or a version), ``host_torch``
    the torch the host brings (None: none; the venv gets SGLang's own). Raises :class:`TorchMismatch` (one
    line: what and what to do) when the result would replace the host's torch and that was not allowed."""
    torch = public(host_torch)
    if setting == "auto":
        if torch is None:
            return Choice(BY_VERSION.get(default), default, f"no torch on the host: the pinned default {default}")
        for row in RELEASES:
            if row.torch == torch:
                why = f"the newest release that pins torch=={torch} (the host's torch is {host_torch})"
                return Choice(row, row.sglang, why)
        known = ", ".join(sorted({r.torch for r in RELEASES}))
        if not allow_torch_change:
            raise TorchMismatch(
                f"no SGLang release in provision's table pins torch {torch} (the host's; the table knows {known}): "
                f"set sglang_version to one that does, or sglang_allow_torch_change=true to take {default} "
                "and its own torch"
            )
        return Choice(BY_VERSION.get(default), default, f"no release pins torch {torch}: {default}, torch replaced")
    release: Release | None = BY_VERSION.get(setting)
    if torch is None:
        return Choice(release, setting, "sglang_version, set")
    if release is None:
        return Choice(None, setting, "sglang_version, set (not in provision's table: its torch is not checked)")
    if release.torch != torch and not allow_torch_change:
        fits = next((r.sglang for r in RELEASES if r.torch == torch), None)
        instead = f"sglang_version=auto (-> {fits})" if fits else "a release that pins it"
        raise TorchMismatch(
            f"sglang {setting} pins torch=={release.torch}, the host's torch is {host_torch}: installing it "
            f"would replace the host's torch; use {instead}, or sglang_allow_torch_change=true"
        )
    return Choice(release, setting, "sglang_version, set" + (", torch replaced" if release.torch != torch else ""))


def requirements(choice: Choice, router_version: str | None = None) -> list[str]:
    """The pins that go into the venv with this choice: SGLang with its companions, and sglang-router."""
    router = router_version or (choice.release.router if choice.release else None) or "0.3.2"
    if choice.release is None:
        return [f"sglang=={choice.version}", f"sglang-router=={router}"]
    return [f"{name}=={version}" for name, version in choice.release.pins().items()] + [f"sglang-router=={router}"]


__all__ = [
    "BY_VERSION", "DEFAULT", "RELEASES", "Choice", "Release", "TorchMismatch", "choose", "public", "requirements",
]  # fmt: skip
