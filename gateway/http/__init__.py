"""The HTTP app: ``create_app(settings)``, the OpenAI-compatible endpoints, the request path
(admit → cache → dispatch → respond → settle), request context, serving under uvicorn with
a draining shutdown, and config hot reload.

The top of the app: it may import every package below it, and nothing but the CLI
imports it.
"""
