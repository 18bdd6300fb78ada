"""A request's prefix chain is hashed only where routing may read it: for a model that
shares a deployment with a route whose policy reads live figures."""

from __future__ import annotations

from gateway.config import parse_config
from gateway.dispatch import Gateway
from gateway.dispatch.routing.describing import describe_request
from gateway.protocol import ChatCompletionRequest

CONFIG = """
deployments:
  - {name: a, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: up}
  - {name: b, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: up}
  - {name: c, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: up}
models:
  plain: {candidates: [a]}
  placed: {candidates: [b, c], policy: [cached_prefix]}
  beside: {candidates: [a, c], policy: [first]}
"""


def test_only_models_sharing_a_deployment_with_a_live_route_read_prefixes() -> None:
    gateway = Gateway.from_config(parse_config(CONFIG, "shunter.yaml"))
    assert not gateway.reads_prefixes("plain")  # the default policy reads no live figures
    assert gateway.reads_prefixes("placed")
    assert gateway.reads_prefixes("beside")  # what it sends to c counts as held there
    assert not gateway.reads_prefixes("unknown")


def test_a_reload_is_seen() -> None:
    gateway = Gateway.from_config(parse_config(CONFIG, "shunter.yaml"))
    assert not gateway.reads_prefixes("plain")
    gateway.config = parse_config(CONFIG.replace("[a]}", "[a], policy: [fastest]}"), "s.yaml")
    assert gateway.reads_prefixes("plain")


def test_a_request_described_without_prefixes_differs_only_in_its_chain() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "model": "plain",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "déjà vu " * 1000},
            ],
        }
    )
    full = describe_request(body, "r1", "s1")
    bare = describe_request(body, "r1", "s1", prefixes=False)
    assert len(full.prefix_chain) > 2
    assert full.prefix_shared == 1
    assert (bare.prefix_chain, bare.prefix_shared) == ((), 0)
    assert bare.prompt_tokens == full.prompt_tokens
    assert bare.prefix_key == full.prefix_key
    assert bare.session_id == "s1"
