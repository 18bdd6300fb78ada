"""The upstream HTTP client remote backends share, by concern:

* :mod:`~backends.http.h1`: a pooled HTTP/1.1 client;
* :mod:`~backends.http.upstream`: the connection to one upstream under its deadlines;
* :mod:`~backends.http.backend`: :class:`~backends.http.backend.HTTPBackend`, the base of
  every backend over a remote API (start, close, requests in flight, health probes);
* :mod:`~backends.http.settings`: where an upstream lives and its API key;
* :mod:`~backends.http.sse`: streamed bodies cut into SSE events;
* :mod:`~backends.http.errors`: upstream failures onto :mod:`gateway.errors`, from one
  table per kind; :mod:`~backends.http.redact`: what an upstream must not show anyone;
* :mod:`~backends.http.jsonbody`: bodies as JSON.
"""
