"""The manifest linters `make test` runs on what users apply (issue 43): kubeconform with
strict JSON schemas made from the local API server's own OpenAPI document and from the
CRDs' schemas, and kube-score. Both are built from their Go modules (e2e/build-linters.sh).

kubeconform cannot reach its schema registry from here, and a registry's schemas are for
some Kubernetes version: the API server that will take the manifests says what it takes.
Strict means what the API server's field validation does: an unknown field is an error."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The API server's definitions of types that YAML writes as numbers or strings.
_NUMBER_OR_STRING = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "oneOf": [{"type": "string"}, {"type": "number"}]
    },
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "oneOf": [{"type": "string"}, {"type": "integer"}]
    },
}
# kube-score's grades (its scorecard package): below this a check found something.
_ALL_OK = 10
# Where kubeconform finds a kind's schema: DIR/{group, or v1}/{version}/{kind}.json.
_LOCATION = "{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json"


class _Loader(yaml.SafeLoader):
    """YAML 1.1's `=` (the "value" key type) is a plain string, as in YAML 1.2 and Go's
    parsers: prometheus-operator's CRDs list `=` among a field's allowed values."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: node.value)


def documents(files: Iterable[Path]) -> list[dict[str, Any]]:
    """Every non-empty YAML document of `files`, in order."""
    return [d for f in files for d in yaml.load_all(f.read_text(), Loader=_Loader) if d]


_SCHEMA_MAPS = ("properties", "patternProperties", "definitions")  # name -> schema
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")


def _strict(schema: Any) -> Any:
    """`schema` with every object that lists its properties closed to others, as the
    API server's strict field validation is, unless it keeps unknown fields; walked by
    JSON Schema's keywords, so that a property named `properties` (JSONSchemaProps has
    one) is a name, not a keyword."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for keyword in _SCHEMA_MAPS:
        if isinstance(out.get(keyword), dict):
            out[keyword] = {name: _strict(sub) for name, sub in out[keyword].items()}
    for keyword in _SCHEMA_LISTS:
        if isinstance(out.get(keyword), list):
            out[keyword] = [_strict(sub) for sub in out[keyword]]
    for keyword in ("items", "additionalProperties", "not"):
        if isinstance(out.get(keyword), dict):
            out[keyword] = _strict(out[keyword])
        elif isinstance(out.get(keyword), list):
            out[keyword] = [_strict(sub) for sub in out[keyword]]
    if out.get("x-kubernetes-int-or-string") is True:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and out.get("x-kubernetes-preserve-unknown-fields") is not True
    ):
        out["additionalProperties"] = False
    return out


def _schema_path(directory: Path, group: str, version: str, kind: str) -> Path:
    return directory / (group or version) / version / f"{kind.lower()}.json"


def _references(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            yield ref.removeprefix("#/definitions/")
        for value in schema.values():
            yield from _references(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _references(item)


def write_api_server_schemas(
    openapi_v2: dict[str, Any], kinds: set[tuple[str, str]], directory: Path
) -> set[tuple[str, str]]:
    """One standalone strict schema per (apiVersion, kind) in `kinds` that the API
    server's OpenAPI v2 document defines, with the definitions it refers to; returns
    the kinds written."""
    definitions: dict[str, Any] = {
        name: _NUMBER_OR_STRING.get(name) or _strict(body)
        for name, body in openapi_v2["definitions"].items()
    }
    written = set()
    for name, body in openapi_v2["definitions"].items():
        for gvk in body.get("x-kubernetes-group-version-kind") or []:
            api_version = "/".join(filter(None, (gvk["group"], gvk["version"])))
            if (api_version, gvk["kind"]) not in kinds:
                continue
            needed, queue = set(), [name]
            while queue:
                current = queue.pop()
                if current not in needed:
                    needed.add(current)
                    queue.extend(_references(definitions[current]))
            schema = {
                "$ref": f"#/definitions/{name}",
                "definitions": {n: definitions[n] for n in sorted(needed)},
            }
            path = _schema_path(directory, gvk["group"], gvk["version"], gvk["kind"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(schema))
            written.add((api_version, gvk["kind"]))
    return written


def write_crd_schemas(crds: Iterable[dict[str, Any]], directory: Path) -> set[tuple[str, str]]:
    """One strict schema per version of each CRD, from its openAPIV3Schema."""
    written = set()
    for crd in crds:
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _strict(version["schema"]["openAPIV3Schema"])
            # Every object has these, whether or not the CRD's schema says so.
            properties = schema.setdefault("properties", {})
            properties.setdefault("apiVersion", {"type": "string"})
            properties.setdefault("kind", {"type": "string"})
            properties.setdefault("metadata", {"type": "object"})
            schema["additionalProperties"] = False
            path = _schema_path(directory, group, version["name"], kind)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(schema))
            written.add((f"{group}/{version['name']}", kind))
    return written


def kubeconform(binary: Path, schemas: Path, files: Iterable[Path]) -> list[str]:
    """kubeconform's complaints about `files` (empty: every document is valid); a kind
    with no schema is a complaint too, not a skip."""
    result = subprocess.run(
        [
            str(binary),
            "-strict",
            "-summary",
            "-output",
            "json",
            "-schema-location",
            f"{schemas}/{_LOCATION}",
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(result.stdout)
    complaints = [
        f"{r['filename']}: {r['kind']}/{r['name']}: {r['status']}: {r['msg']}"
        for r in report["resources"]
        if r["status"] != "statusValid"
    ]
    if result.returncode != 0 and not complaints:
        complaints.append(f"kubeconform exited {result.returncode}: {result.stderr.strip()}")
    return complaints


@dataclass(frozen=True, order=True)
class Finding:
    """What kube-score found in one check of one object: its check id and summary."""

    check: str
    summary: str
    kind: str
    name: str
    file: str


def kube_score(binary: Path, files: Iterable[Path], kubernetes_version: str) -> list[Finding]:
    """Every finding of kube-score's default checks (grade below all OK, not skipped)."""
    found = []
    for file in files:
        result = subprocess.run(
            [
                str(binary),
                "score",
                "--output-format",
                "json",
                "--output-version",
                "v2",
                "--kubernetes-version",
                kubernetes_version,
                str(file),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if not result.stdout.strip():
            raise RuntimeError(f"kube-score gave no report on {file}: {result.stderr.strip()}")
        for scored in json.loads(result.stdout):
            for check in scored["checks"]:
                if check["skipped"] or check["grade"] >= _ALL_OK:
                    continue
                for comment in check["comments"] or [{"summary": check["check"]["name"]}]:
                    found.append(
                        Finding(
                            check["check"]["id"],
                            comment["summary"],
                            scored["type_meta"]["kind"],
                            scored["object_name"],
                            file.name,
                        )
                    )
    return sorted(found)


def explained_checks(markdown: str, heading: str) -> dict[tuple[str, str], str]:
    """The table under `heading`: (check id, where) -> why, from rows whose first two
    cells are `check-id` and where it applies."""
    section = markdown.split(heading, 1)[1].split("\n#", 1)[0]
    explained = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([a-z0-9-]+)`", cells[0]) if len(cells) >= 3 else None
        if match:
            explained[(match.group(1), cells[1])] = cells[2]
    return explained
