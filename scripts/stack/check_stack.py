"""The checks of scripts/test-stack.sh against the compose stack on 127.0.0.1.

    check_stack.py wait-healthy PROJECT SINCE   every container of PROJECT healthy
    check_stack.py ask SINCE                     the README's question, timed from SINCE
    check_stack.py store SECRET                  a stored response made with a virtual key
    check_stack.py survived SECRET RESPONSE_ID   both still work after Redis restarted
    check_stack.py scraped                       Prometheus scrapes the gateway

SINCE is a Unix time (``date +%s.%N``). Each prints what it saw; a failed check exits 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
from openai import OpenAI

GATEWAY = "http://127.0.0.1:8000/v1"
QUESTION = "What is the capital of France? Answer in one sentence."


def wait_healthy(project: str, since: float, timeout_s: float = 900.0) -> None:
    """Until every container of ``project`` with a healthcheck says healthy."""
    label = f"label=com.docker.compose.project={project}"
    while True:
        ids = _docker("ps", "-q", "--filter", label).split()
        states = {}
        for found in json.loads(_docker("inspect", *ids)) if ids else []:
            name = found["Config"]["Labels"]["com.docker.compose.service"]
            health = found["State"].get("Health")
            states[name] = health["Status"] if health else found["State"]["Status"]
        waiting = sorted(n for n, s in states.items() if s not in ("healthy", "running"))
        if states and not waiting:
            took = time.time() - since
            print(f"healthy after {took:.0f} s: {', '.join(sorted(states))}")
            return
        if time.time() - since > timeout_s or any(s == "unhealthy" for s in states.values()):
            sys.exit(f"not healthy after {time.time() - since:.0f} s: {states}")
        time.sleep(2)


def ask(since: float) -> None:
    """The README's first example, through the published port, with the master key."""
    client = OpenAI(base_url=GATEWAY, api_key=os.environ["SHUNTER_MASTER_KEY"])
    reply = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": QUESTION}],
        temperature=0,
        max_tokens=32,
    )
    answer = reply.choices[0].message.content or ""
    print(f"smollm2: {answer!r}")
    print(f"time to first answer: {time.time() - since:.1f} s after `up -d` began")
    if "Paris" not in answer:
        sys.exit("the answer does not name Paris")


def store(secret: str) -> None:
    """A response stored (``store: true``) with the virtual key; prints its id first."""
    response = _create(secret)
    print(f"stored response {response['id']} ({response['output_text']!r})")


def survived(secret: str, response_id: str) -> None:
    """After the restart: the key still answers, the stored response still reads back."""
    headers = {"authorization": f"Bearer {secret}"}
    got = httpx.get(f"{GATEWAY}/responses/{response_id}", headers=headers, timeout=30)
    if got.status_code != 200:
        sys.exit(f"the stored response is gone: {got.status_code} {got.text[:200]}")
    again = _create(secret, store=False)
    print(f"after the restart: stored response {response_id} read back; the key answered again")
    print(f"  ({again['output_text']!r})")


def scraped(timeout_s: float = 60.0) -> None:
    """Prometheus (published on :9090) has scraped the gateway's /metrics."""
    query = 'up{job="shunter",variant="cpu"}'
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = httpx.get(
            "http://127.0.0.1:9090/api/v1/query", params={"query": query}, timeout=10
        ).json()["data"]["result"]
        if found and found[0]["value"][1] == "1":
            series = httpx.get(
                "http://127.0.0.1:9090/api/v1/label/__name__/values", timeout=10
            ).json()["data"]
            ours = [s for s in series if s.startswith("shunter_")]
            print(f"prometheus: {query} = 1; {len(ours)} shunter_* series scraped")
            return
        time.sleep(2)
    sys.exit(f"prometheus never scraped the gateway ({query})")


def _create(secret: str, *, store: bool = True) -> dict[str, object]:
    body = {
        "model": "smollm2",
        "input": QUESTION,
        "temperature": 0,
        "max_output_tokens": 32,
        "store": store,
    }
    headers = {"authorization": f"Bearer {secret}"}
    reply = httpx.post(f"{GATEWAY}/responses", json=body, headers=headers, timeout=120)
    if reply.status_code != 200:
        sys.exit(f"POST /v1/responses: {reply.status_code} {reply.text[:300]}")
    response: dict[str, object] = reply.json()
    if store and response.get("store") is not True:
        sys.exit("the response was not stored")
    texts = [
        part.get("text", "")
        for item in response.get("output", [])  # type: ignore[union-attr]
        for part in item.get("content") or []
    ]
    response["output_text"] = "".join(texts)
    return response


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "wait-healthy":
        wait_healthy(args[0], float(args[1]))
    elif command == "ask":
        ask(float(args[0]))
    elif command == "store":
        store(args[0])
    elif command == "survived":
        survived(args[0], args[1])
    elif command == "scraped":
        scraped()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
