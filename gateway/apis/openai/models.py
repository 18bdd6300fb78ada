"""``GET /v1/models`` and ``GET /v1/models/{model}``: the models the caller's key may use."""

from __future__ import annotations

from gateway.admission.keys import may_use
from gateway.apis.contract import Exchange, Reply
from gateway.errors import NotFoundError
from gateway.protocol import ModelList, jsonio


def visible_models(exchange: Exchange) -> ModelList:
    """The gateway's models that the caller's key may use."""
    models = exchange.gateway.model_list()
    key = exchange.key
    if key.models is None:
        return models
    return ModelList(data=[m for m in models.data if may_use(key, m.id)])


async def list_models(exchange: Exchange) -> Reply:
    return Reply(jsonio.to_json(visible_models(exchange)))


async def retrieve_model(exchange: Exchange) -> Reply:
    model_id = str(exchange.path_params.get("model_id", "")).lstrip("/")
    for model in visible_models(exchange).data:
        if model.id == model_id:
            return Reply(jsonio.to_json(model))
    raise NotFoundError(
        f"The model '{model_id}' does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )
