"""The agent-era ingress APIs, translated to the gateway's chat request and back.

* :mod:`~gateway.ingress.responses`, :mod:`~gateway.ingress.response_events`: OpenAI's
  Responses API (whole answers and stream events), with stored conversations in
  :mod:`~gateway.ingress.store`;
* :mod:`~gateway.ingress.messages`, :mod:`~gateway.ingress.message_answer`,
  :mod:`~gateway.ingress.message_events`: Anthropic's Messages API (the request kept as
  sent for a Messages upstream, translated for the rest; what both directions name
  differently is
  :mod:`gateway.protocol.messages_codec`; a backend that speaks Messages natively says so
  in its capabilities);
* :mod:`~gateway.ingress.translate`: the shared frame stream over chat chunks.

Nothing here knows HTTP: the endpoint classes :mod:`gateway.http.responses` and
:mod:`gateway.http.messages` put these on the request path.
"""
