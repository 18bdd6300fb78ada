"""docker-compose.yml ships no secret: the gateway's master key must come from the operator."""

from __future__ import annotations

import re

from tests.deploy.common import ROOT, load_yaml

# Compose's "required" interpolation: without the variable, `docker compose up` stops with
# the message instead of starting a gateway with a key everyone can read
REQUIRED = re.compile(r"^\$\{SHUNTER_MASTER_KEY:\?[^}]+\}$")


def test_the_master_key_is_required_and_has_no_default() -> None:
    compose = load_yaml(ROOT / "docker-compose.yml")
    gateways = {
        name: service["environment"]["SHUNTER_MASTER_KEY"]
        for name, service in compose["services"].items()
        if "SHUNTER_MASTER_KEY" in service.get("environment", {})
    }
    assert set(gateways) == {"gateway", "gateway-gpu"}
    for name, value in gateways.items():
        assert REQUIRED.match(value), f"{name}: SHUNTER_MASTER_KEY must be required, not {value}"
    assert not re.search(r"SHUNTER_MASTER_KEY:?-", (ROOT / "docker-compose.yml").read_text())
