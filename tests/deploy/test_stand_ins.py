"""The local stand-ins of scripts/test-stack.sh cover every base image the default compose
profile starts from, so that the stack can be built where no registry answers."""

from __future__ import annotations

import re

from tests.deploy.common import ROOT, load_yaml

STAND_INS = ROOT / "scripts/stack/stand-ins"


def base_images() -> set[str]:
    """What scripts/stack/stand-ins.sh looks at: the ``ARG *_IMAGE`` defaults of the two
    Dockerfiles the default profile builds, and the images of its services that build
    nothing."""
    images = set()
    for dockerfile in (ROOT / "Dockerfile", ROOT / "deploy/otel/Dockerfile"):
        images |= set(re.findall(r"^ARG [A-Z_]*_IMAGE=(\S+)$", dockerfile.read_text(), re.M))
    services = load_yaml(ROOT / "docker-compose.yml")["services"]
    for service in services.values():
        if "build" not in service and "profiles" not in service:
            images.add(service["image"])
    return images


def recipes() -> dict[str, str]:
    """Repository -> stand-in, from each stand-in Dockerfile's second line."""
    found = {}
    for path in STAND_INS.glob("*.Dockerfile"):
        line = path.read_text().splitlines()[1]
        assert line.startswith("# stand-in for: "), path
        found[line.removeprefix("# stand-in for: ")] = path.stem
    return found


def test_every_base_image_of_the_default_profile_has_a_stand_in() -> None:
    images = base_images()
    assert {"python:3.11-slim-bookworm", "redis:7.4-alpine"} <= images
    missing = {image for image in images if image.rsplit(":", 1)[0] not in recipes()}
    assert not missing


def test_stand_ins_build_from_the_debootstrapped_base_and_say_what_they_are() -> None:
    for path in STAND_INS.glob("*.Dockerfile"):
        text = path.read_text()
        assert "FROM shunter-stand-in/debian:12" in text, path
        assert text.splitlines()[0].startswith("# "), path  # the line every run prints
    # two stand-ins are not the software they stand for, and say so
    for name in ("grafana", "otelcol"):
        assert (STAND_INS / f"{name}.Dockerfile").read_text().startswith("# NOT ")
