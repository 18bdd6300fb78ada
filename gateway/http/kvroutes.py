"""Moving one sequence's KV cache in and out of a worker's engine.

* ``GET /v1/worker/kv/{link}``: the state of a sequence holding the prefix link ``link``,
  as ``application/octet-stream``: one JSON header line (:class:`backends.kv.KvHeader`),
  then the raw state, sent in 1 MiB slices with its ``content-length``;
* ``PUT /v1/worker/kv``: such a stream as the body, imported into a free sequence; the
  answer is ``{"tokens", "bytes", "seconds"}``.

Both need the master key where keys are configured (401 without a key, 403 with another),
and answer only for a deployment that moves KV (``capabilities.kv_move``): the one such
deployment, or the one named by ``?deployment=``. The import's body is not a JSON body:
the spine's body cap does not apply; its bound is the deployment's (``kv_move_max_mb``,
and what a full sequence takes: 413 from the declared ``content-length`` or the header,
before the state is read; a body that sends more than declared is cut), and it gets
``kv_move_timeout_s`` to arrive instead of the server's ``body_timeout_s``. Each write of
an export waits for its client at most the spine's send timeout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from litestar import Request, Response, get, put
from litestar.params import FromPath
from litestar.types import ASGIApp, Receive, Scope, Send

from backends.base import Backend
from backends.kv import HEADER_MAX_BYTES, KV_MEDIA_TYPE, encode_header, split_header
from gateway.dispatch import Gateway
from gateway.errors import (
    AuthenticationError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    RequestTooLargeError,
)
from gateway.http.asgi import ClientWatch, longer_body_deadline
from gateway.http.intake import taking_work
from gateway.http.spine import Spine


async def _operator(request: Request[Any, Any, Any]) -> None:
    """The master key, where keys are configured (a loopback worker without keys is open)."""
    spine: Spine = request.app.state.spine
    admission = spine.services.admission
    if not await admission.keys.auth_enabled():
        return
    authorization = request.headers.get("authorization")
    if not authorization:
        raise AuthenticationError("Moving KV needs the master key as a bearer token.")
    await admission.authenticate(authorization)  # 401 for an unknown key
    if not admission.keys.is_master(authorization):
        raise PermissionDeniedError("Moving KV needs the master key, not a client key.")


def _deployment(request: Request[Any, Any, Any]) -> tuple[Backend, int, float]:
    """The deployment that moves KV, with its bounds (bytes, seconds)."""
    gateway: Gateway = request.app.state.gateway
    named = request.query_params.get("deployment")
    limits = {d.name: d.kv_move_limits() for d in gateway.config.deployments}
    movers = [name for name, bounds in limits.items() if bounds is not None]
    if named is None and len(movers) != 1:
        raise InvalidRequestError(
            f"name the deployment (?deployment=): these move KV: {', '.join(movers) or 'none'}",
            param="deployment",
        )
    name = named if named is not None else movers[0]
    backend, bounds = gateway.backends.get(name), limits.get(name)
    if backend is None or bounds is None or not backend.capabilities.kv_move:
        raise NotFoundError(f"no deployment {name!r} here moves KV", code="kv_not_supported")
    return backend, *bounds


# an operation name gives each move its access line, as every API request has one
@get("/v1/worker/kv/{link:str}", opt={"operations": {"GET": "kv_export"}})
async def export_kv(request: Request[Any, Any, Any], link: FromPath[str]) -> ASGIApp:
    """A sequence's KV state: a header line, then the state (see the module docstring)."""
    await _operator(request)
    backend, _, _ = _deployment(request)
    exports = request.app.state.gateway.fleet.kv_exports
    exports.asked()
    header, chunks = await backend.export_kv(link)
    exports.record(held for held, _ in header.chain)
    head = encode_header(header)
    spine: Spine = request.app.state.spine

    async def send_state(scope: Scope, receive: Receive, send: Send) -> None:
        watch = ClientWatch(receive, send, spine.send_timeout_s)
        watch.start(scope)
        length = str(len(head) + header.n_bytes).encode()
        headers = [(b"content-type", KV_MEDIA_TYPE.encode()), (b"content-length", length)]
        try:
            await watch.send({"type": "http.response.start", "status": 200, "headers": headers})
            await watch.send({"type": "http.response.body", "body": head, "more_body": True})
            async for chunk in chunks:
                await watch.send({"type": "http.response.body", "body": chunk, "more_body": True})
            await watch.send({"type": "http.response.body", "body": b"", "more_body": False})
        except BaseException:
            if watch.gone is None:
                raise
        finally:
            watch.stop()

    return send_state


@put(
    "/v1/worker/kv",
    request_max_body_size=None,
    status_code=200,
    opt={"operations": {"PUT": "kv_import"}},
)
async def import_kv(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    """Import a KV stream into a free sequence (see the module docstring)."""
    await _operator(request)
    taking_work(request.app.state.gateway)
    backend, max_bytes, timeout_s = _deployment(request)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes + HEADER_MAX_BYTES:
        raise RequestTooLargeError(
            f"a KV state here is at most {max_bytes} bytes (kv_move_max_mb); "
            f"this body declares {declared}",
            code="kv_too_large",
        )
    longer_body_deadline(request.scope, timeout_s)
    header, state = await split_header(_body(request))
    done = await backend.import_kv(header, state)
    return Response(done.model_dump())


async def _body(request: Request[Any, Any, Any]) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        if chunk:
            yield chunk


KV_ROUTES = [export_kv, import_kv]
