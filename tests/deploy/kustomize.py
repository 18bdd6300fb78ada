"""A small ``kustomize build`` for the subset of kustomize that deploy/kubernetes uses.

No kustomize binary exists on the build machines, so the tests render the overlays here.
Supported: ``resources`` (files and directories), ``components``, ``configMapGenerator``
(``files``, ``literals``, ``behavior``) with ``generatorOptions.disableNameSuffixHash: true``,
``patches`` (strategic merge, from ``path`` or inline ``patch``, optional ``target``),
``images`` and ``namespace``, applied in kustomize's order: resources, components,
generators, patches, namespace, images. Anything else raises :class:`UnsupportedError`, so
a kustomization that grows past this subset fails the tests instead of rendering wrongly.

Strategic merge follows Kubernetes' patch strategies for the lists the manifests patch
(containers, volumes, env, volumeMounts by their merge keys); other lists are replaced, and
custom resources merge like a JSON merge patch (maps merge, lists replace), as kustomize
does for kinds it has no schema for. ``null`` deletes a field.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "namespace",
        "resources",
        "components",
        "configMapGenerator",
        "generatorOptions",
        "patches",
        "images",
    }
)
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "PersistentVolume",
        "StorageClass",
        "PriorityClass",
        "IngressClass",
        "RuntimeClass",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "APIService",
    }
)
# patchMergeKey of the lists that Kubernetes merges (patchStrategy: merge) and that we patch
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "imagePullSecrets": "name",
}
# merged lists whose key depends on where they sit (container ports vs Service ports)
UNSUPPORTED_MERGE_LISTS = frozenset({"ports", "volumeDevices"})
POD_TEMPLATE_CONTAINER_LISTS = ("containers", "initContainers")


class UnsupportedError(ValueError):
    """The kustomization uses something this renderer does not implement."""


def build(directory: Path) -> list[Resource]:
    """Render the kustomization in ``directory``, like ``kustomize build DIRECTORY``."""
    resources: list[Resource] = []
    _apply(directory, _load_kustomization(directory, "Kustomization"), resources)
    _check_unique(resources)
    return resources


def kustomization_dirs(root: Path) -> Iterator[Path]:
    """Every directory under ``root`` holding a kustomization (not a component)."""
    for name in KUSTOMIZATION_FILES:
        for path in sorted(root.rglob(name)):
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            if data.get("kind", "Kustomization") == "Kustomization":
                yield path.parent


def resource_id(resource: Resource) -> str:
    meta = resource.get("metadata", {})
    namespace = meta.get("namespace")
    name = f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))
    return f"{resource.get('kind')} {name}"


def _load_kustomization(directory: Path, kind: str) -> dict[str, Any]:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
            break
    else:
        raise FileNotFoundError(f"no kustomization in {directory}")
    unsupported = sorted(set(data) - SUPPORTED_FIELDS)
    if unsupported:
        raise UnsupportedError(f"{path}: unsupported fields {unsupported}")
    if data.get("kind", "Kustomization") != kind:
        raise UnsupportedError(f"{path}: expected kind {kind}, found {data.get('kind')}")
    return data


def _apply(directory: Path, kustomization: dict[str, Any], resources: list[Resource]) -> None:
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            resources.extend(build(path))
        else:
            resources.extend(_load_documents(path))
    for entry in kustomization.get("components", []):
        path = (directory / entry).resolve()
        _apply(path, _load_kustomization(path, "Component"), resources)
    _generate_config_maps(directory, kustomization, resources)
    for patch in kustomization.get("patches", []):
        _apply_patch(directory, patch, resources)
    namespace = kustomization.get("namespace")
    if namespace:
        for resource in resources:
            if resource["kind"] not in CLUSTER_SCOPED_KINDS:
                resource.setdefault("metadata", {})["namespace"] = namespace
    for image in kustomization.get("images", []):
        for resource in resources:
            _set_image(resource, image)


def _load_documents(path: Path) -> list[Resource]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            raise ValueError(f"{path}: every document must be a Kubernetes object")
    return docs


def _generate_config_maps(
    directory: Path, kustomization: dict[str, Any], resources: list[Resource]
) -> None:
    generators = kustomization.get("configMapGenerator", [])
    if not generators:
        return
    if not kustomization.get("generatorOptions", {}).get("disableNameSuffixHash"):
        # a hash suffix renames the ConfigMap and every reference to it: not implemented
        raise UnsupportedError(f"{directory}: generators need disableNameSuffixHash: true")
    for generator in generators:
        unknown = sorted(set(generator) - {"name", "files", "literals", "behavior"})
        if unknown:
            raise UnsupportedError(f"{directory}: configMapGenerator fields {unknown}")
        data: dict[str, str] = {}
        for entry in generator.get("files", []):
            key, _, file = entry.rpartition("=") if "=" in entry else ("", "", entry)
            source = directory / file
            data[key or source.name] = source.read_text(encoding="utf-8")
        for literal in generator.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        _add_generated(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": generator["name"]},
                "data": data,
            },
            generator.get("behavior", "create"),
            resources,
        )


def _add_generated(config_map: Resource, behavior: str, resources: list[Resource]) -> None:
    name = config_map["metadata"]["name"]
    existing = [r for r in resources if r["kind"] == "ConfigMap" and r["metadata"]["name"] == name]
    if behavior == "create":
        if existing:
            raise ValueError(f"ConfigMap {name} already exists; use behavior merge or replace")
        resources.append(config_map)
    elif behavior in ("merge", "replace"):
        if len(existing) != 1:
            raise ValueError(f"ConfigMap {name}: behavior {behavior} needs one existing map")
        old = existing[0]
        if behavior == "merge":
            old.setdefault("data", {}).update(config_map["data"])
        else:
            old["data"] = config_map["data"]
    else:
        raise UnsupportedError(f"configMapGenerator behavior {behavior!r}")


def _apply_patch(directory: Path, entry: dict[str, Any], resources: list[Resource]) -> None:
    unknown = sorted(set(entry) - {"path", "patch", "target"})
    if unknown:
        raise UnsupportedError(f"{directory}: patch fields {unknown}")
    text = (directory / entry["path"]).read_text() if "path" in entry else entry["patch"]
    patch = yaml.safe_load(text)
    if not isinstance(patch, dict):
        raise UnsupportedError(f"{directory}: only strategic-merge patches are supported")
    target = entry.get("target") or {
        "kind": patch["kind"],
        "name": patch["metadata"]["name"],
        "group": _group(patch["apiVersion"]),
    }
    matches = [r for r in resources if _matches(r, target)]
    if not matches:
        raise ValueError(f"{directory}: patch {entry} matches no resource")
    for resource in matches:
        _merge(resource, patch, builtin=_is_builtin(resource["apiVersion"]), field=None)


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _is_builtin(api_version: str) -> bool:
    group = _group(api_version)
    return "." not in group or group.endswith(".k8s.io")


def _matches(resource: Resource, target: dict[str, Any]) -> bool:
    unknown = sorted(set(target) - {"kind", "name", "group", "version", "namespace"})
    if unknown:
        raise UnsupportedError(f"patch target fields {unknown}")
    meta = resource["metadata"]
    checks = {
        "kind": resource["kind"],
        "name": meta["name"],
        "group": _group(resource["apiVersion"]),
        "version": resource["apiVersion"].rpartition("/")[2],
        "namespace": meta.get("namespace"),
    }
    return all(checks[key] == value for key, value in target.items())


def _merge(
    base: dict[str, Any], patch: dict[str, Any], *, builtin: bool, field: str | None
) -> None:
    for key, value in patch.items():
        if key.startswith("$"):
            raise UnsupportedError(f"patch directive {key} (under {field})")
        if value is None:
            base.pop(key, None)
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value, builtin=builtin, field=key)
        elif isinstance(value, list) and isinstance(base.get(key), list):
            base[key] = _merge_list(base[key], value, builtin=builtin, field=key)
        else:
            base[key] = copy.deepcopy(value)


def _merge_list(base: list[Any], patch: list[Any], *, builtin: bool, field: str) -> list[Any]:
    if not builtin:
        return copy.deepcopy(patch)
    if field in UNSUPPORTED_MERGE_LISTS:
        raise UnsupportedError(f"strategic merge of {field!r} lists")
    key = MERGE_KEYS.get(field)
    if key is None:
        return copy.deepcopy(patch)
    merged = copy.deepcopy(base)
    for item in patch:
        match = next((m for m in merged if m.get(key) == item.get(key)), None)
        if match is None:
            merged.append(copy.deepcopy(item))
        else:
            _merge(match, item, builtin=True, field=field)
    return merged


def _set_image(node: Any, image: dict[str, str]) -> None:
    """kustomize's ``images`` transformer: rewrite matching container images anywhere."""
    if isinstance(node, list):
        for item in node:
            _set_image(item, image)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in POD_TEMPLATE_CONTAINER_LISTS and isinstance(value, list):
            for container in value:
                container["image"] = _new_image(container["image"], image)
        else:
            _set_image(value, image)


def _new_image(current: str, image: dict[str, str]) -> str:
    unknown = sorted(set(image) - {"name", "newName", "newTag", "digest"})
    if unknown:
        raise UnsupportedError(f"images fields {unknown}")
    name, tag = _split_image(current)
    if name != image["name"]:
        return current
    name = image.get("newName", name)
    if "digest" in image:
        return f"{name}@{image['digest']}"
    tag = image.get("newTag", tag)
    return f"{name}:{tag}" if tag else name


def _split_image(reference: str) -> tuple[str, str]:
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :]
    return name, ""


def _check_unique(resources: list[Resource]) -> None:
    ids = [(r["apiVersion"], resource_id(r)) for r in resources]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"duplicate resources: {duplicates}")
