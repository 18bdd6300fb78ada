"""The Python kustomize renderer that the Kubernetes checks rely on, and the READMEs' paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.deploy.common import DEPLOY, ROOT
from tests.deploy.kustomize import UnsupportedError, build

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "app"},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.local:5000/app:1",
                        "args": ["a", "b"],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    },
                    {"name": "sidecar", "image": "side:1"},
                ],
                "volumes": [{"name": "data", "emptyDir": {}}],
            }
        }
    },
}


def write(directory: Path, files: dict[str, object]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        text = content if isinstance(content, str) else yaml.safe_dump(content)
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def test_patches_merge_lists_by_key_and_null_deletes(tmp_path: Path) -> None:
    write(
        tmp_path / "base",
        {"kustomization.yaml": {"resources": ["app.yaml"]}, "app.yaml": DEPLOYMENT},
    )
    patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "app"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "args": ["c"],
                            "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "data",
                            "emptyDir": None,
                            "persistentVolumeClaim": {"claimName": "pvc"},
                        }
                    ],
                }
            }
        },
    }
    overlay = write(
        tmp_path / "overlay",
        {
            "kustomization.yaml": {
                "namespace": "ns",
                "resources": ["../base"],
                "patches": [{"path": "patch.yaml"}],
                "images": [{"name": "registry.local:5000/app", "newTag": "2"}],
            },
            "patch.yaml": patch,
        },
    )
    (deployment,) = build(overlay)
    spec = deployment["spec"]["template"]["spec"]
    main, sidecar = spec["containers"]
    assert main["args"] == ["c"]  # plain lists are replaced
    assert main["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "4"},
    ]
    assert main["image"] == "registry.local:5000/app:2" and sidecar["image"] == "side:1"
    assert spec["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}}]
    assert deployment["metadata"]["namespace"] == "ns"


def test_config_map_generator_and_components(tmp_path: Path) -> None:
    write(tmp_path / "base" / "files", {"a.yaml": "x: 1\n"})
    write(
        tmp_path / "base",
        {
            "kustomization.yaml": {
                "configMapGenerator": [{"name": "cfg", "files": ["main.yaml=files/a.yaml"]}],
                "generatorOptions": {"disableNameSuffixHash": True},
            }
        },
    )
    write(
        tmp_path / "component",
        {
            "kustomization.yaml": {"kind": "Component", "resources": ["app.yaml"]},
            "app.yaml": DEPLOYMENT,
        },
    )
    write(tmp_path / "overlay" / "files", {"b.yaml": "x: 2\n"})
    overlay = write(
        tmp_path / "overlay",
        {
            "kustomization.yaml": {
                "resources": ["../base"],
                "components": ["../component"],
                "configMapGenerator": [
                    {"name": "cfg", "behavior": "replace", "files": ["main.yaml=files/b.yaml"]}
                ],
                "generatorOptions": {"disableNameSuffixHash": True},
            }
        },
    )
    kinds = {r["kind"]: r for r in build(overlay)}
    assert kinds["ConfigMap"]["data"] == {"main.yaml": "x: 2\n"}
    assert kinds["Deployment"]["metadata"]["name"] == "app"


@pytest.mark.parametrize(
    "kustomization",
    [
        {"resources": ["app.yaml"], "commonLabels": {"a": "b"}},
        {"resources": ["app.yaml"], "configMapGenerator": [{"name": "c", "literals": ["a=b"]}]},
        {"resources": ["app.yaml"], "patches": [{"patch": "- op: remove\n  path: /spec"}]},
    ],
)
def test_unsupported_kustomize_features_fail_loudly(
    tmp_path: Path, kustomization: dict[str, object]
) -> None:
    write(tmp_path, {"kustomization.yaml": kustomization, "app.yaml": DEPLOYMENT})
    with pytest.raises(UnsupportedError):
        build(tmp_path)


@pytest.mark.parametrize("readme", [DEPLOY / "README.md", DEPLOY / "kubernetes" / "README.md"])
def test_readme_paths_exist(readme: Path) -> None:
    text = readme.read_text(encoding="utf-8")
    paths = set(re.findall(r"(?<![\w/.])((?:tests/)?deploy/[\w./-]*\w)", text))
    assert paths
    for path in paths:
        assert (ROOT / path).exists(), f"{readme.name} names {path}"
    for link in re.findall(r"\]\(([^)#]+)", text):
        assert (readme.parent / link).exists(), f"{readme.name} links {link}"
