"""The HTTP app: ``create_app(settings)`` (:mod:`~gateway.http.app`), the endpoints, the
request path, request context, serving under uvicorn with a draining shutdown, and config
hot reload.

Each generation API is one module with its :class:`~gateway.http.endpoint.Endpoint` class
and its routes: :mod:`~gateway.apis.openai.chat`, :mod:`~gateway.apis.openai.completions`,
:mod:`~gateway.apis.responses.endpoint`, :mod:`~gateway.apis.anthropic.endpoint`; and
:mod:`~gateway.apis.openai.embeddings`. They all run on one spine, :mod:`~gateway.http.serving`
(authenticate → admit → cache → dispatch → write → settle), which reads the caller's key
and body through :mod:`~gateway.http.intake` and asks a backend for an optional ability
only through :mod:`~gateway.http.abilities`. :mod:`~gateway.http.routes` holds the other
routes (models, health, metrics, worker stats).

The top of the app: it may import every package below it (dispatch only through its face,
:mod:`gateway.dispatch`), and nothing but the CLI imports it.
"""
