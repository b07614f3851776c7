"""What the API's parts share: its group and kind, the bases of its models, and
the strings it checks as the API server does (quantities, label keys, names)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    Strict,
    StringConstraints,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from specfleet.operator.rules import CheckedAnnotation, RuledModel

# The runtime's config is the contract the operator renders; the API shares its
# vocabulary rather than keeping a second copy.

GROUP = "specfleet.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpeculativeModel"
PLURAL = "speculativemodels"
SINGULAR = "speculativemodel"
SHORT_NAMES = ["specmodel", "specmodels"]

HISTORY_LIMIT = 20
# The CEL rule over runtime.args runs a regex on every arg, so its cost grows with the
# list's and each arg's maximum length: these keep its worst case under the API
# server's per-call limit, so no admissible object can fail on cost instead of the rule.
MAX_ARGS = 64
MAX_ARG_LENGTH = 1024
# Pods left out of a window that status names, and the length of each message: status
# stays small whatever the pods serve and however many of them fail.
LEFT_OUT_LIMIT = 5
LEFT_OUT_MESSAGE_LIMIT = 200

DNS_1035_LABEL = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_1035_WORDS = (
    "a DNS-1035 label (lower case, at most 63 characters, starting with a letter): it "
    "names the model's Service"
)
# What Kubernetes checks in the children: env names (printable ASCII but '='), resource
# quantities (apimachinery's format, without a sign: requests and limits can't be
# negative), label keys (an optional DNS subdomain prefix and a name) and values.
ENV_NAME_PATTERN = r"^[ -<>-~]+$"
# Bounds the cost of the rules that compare quantities at admission.
QUANTITY_MAX_LENGTH = 64
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
DNS_1123_SUBDOMAIN = "[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LABEL_KEY_PATTERN = f"^({DNS_1123_SUBDOMAIN}/)?{_LABEL_NAME}$"
LABEL_KEY_PREFIX_MAX = 253
LABEL_VALUE_PATTERN = f"^({_LABEL_NAME})?$"
NODE_SELECTOR_MAX = 64


@dataclass(frozen=True)
class Matching(CheckedAnnotation):
    """A string the API server checks with a schema pattern (anchored at both ends).
    Pydantic checks the same pattern but says what it means, not the regex."""

    pattern: str
    meaning: str

    def check(self, text: str) -> str:
        if not re.fullmatch(self.pattern, text):
            raise ValueError(f"must be {self.meaning}")
        return text

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["pattern"] = self.pattern
        return json_schema


def _quantity(value: str | int) -> str | int:
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        return value
    if len(value) > QUANTITY_MAX_LENGTH:
        raise ValueError(f"must be at most {QUANTITY_MAX_LENGTH} characters")
    return _QUANTITY.check(value)


_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}


def quantity_value(quantity: str | int) -> Decimal:
    """The amount a Kubernetes quantity (QUANTITY_PATTERN) stands for, exactly: what the
    API server compares requests and limits by. Here rather than the kubernetes client's
    parser, which the decision core does not load."""
    text = str(quantity).lstrip("+")
    if text[-2:] in _BINARY_SUFFIXES:
        return Decimal(text[:-2]) * Decimal(1024) ** _BINARY_SUFFIXES[text[-2:]]
    if re.search(r"[eE][-+]?[0-9.]+$", text):
        return Decimal(text)  # a decimal exponent: Decimal reads it as it is
    suffix = text[-1:] if text[-1:] in _DECIMAL_SUFFIXES else ""
    return Decimal(text[: len(text) - len(suffix)]).scaleb(_DECIMAL_SUFFIXES[suffix])


def is_label_key(key: str) -> bool:
    prefix = key.rpartition("/")[0]
    return bool(re.fullmatch(LABEL_KEY_PATTERN, key)) and len(prefix) <= LABEL_KEY_PREFIX_MAX


_QUANTITY = Matching(
    QUANTITY_PATTERN,
    "a Kubernetes quantity such as '16Gi', '500m' or 4 (a number, not negative, with an "
    "optional suffix)",
)
LABEL_KEY_WORDS = (
    "a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
    "letter or digit, with an optional DNS subdomain prefix and '/' (e.g. "
    "'nvidia.com/gpu.product')"
)


def _label_key(key: str) -> str:
    if not is_label_key(key):
        raise ValueError(f"must be a label key: {LABEL_KEY_WORDS}")
    return key


def _annotation_key(key: str) -> str:
    # The API server checks an annotation's key in lower case.
    if not is_label_key(key.lower()):
        raise ValueError(f"must be an annotation key: {LABEL_KEY_WORDS}")
    return key


LabelKey = Annotated[str, AfterValidator(_label_key)]
AnnotationKey = Annotated[str, AfterValidator(_annotation_key)]
NonEmptyString = Annotated[str, StringConstraints(min_length=1, max_length=512)]
Quantity = Annotated[
    str | int,
    AfterValidator(_quantity),
    Field(
        description="A Kubernetes resource quantity, e.g. '16Gi', 4, '500m'.",
        json_schema_extra={
            "pattern": QUANTITY_PATTERN,
            "minimum": 0,
            "maxLength": QUANTITY_MAX_LENGTH,
        },
    ),
]
LabelValue = Annotated[
    str,
    StringConstraints(max_length=63),
    Matching(
        LABEL_VALUE_PATTERN,
        "a label value: empty, or at most 63 letters, digits, '-', '_' or '.', starting "
        "and ending with a letter or digit",
    ),
]


class ApiModel(BaseModel):
    """Base of every API model: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
        validate_default=True,
    )


class SpecModel(ApiModel, RuledModel):
    """Base of the spec's models: types as strict as the OpenAPI schema, so "2" is not
    an integer and "0.8" not a number offline either (an integer is still a number).
    Enum fields opt out with `Lax`: strict pydantic wants enum instances, not values."""

    model_config = ConfigDict(strict=True)


Lax = Strict(False)


def cel_list(values: list[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def in_words(values: list[str]) -> str:
    return ", ".join(values[:-1]) + f" or {values[-1]}" if len(values) > 1 else values[0]


DNS_1123_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


# A namespace's name, as the API server takes it (offline: `specfleet validate`, `render`).
NamespaceName = Annotated[
    str,
    StringConstraints(max_length=63),
    Matching(DNS_1123_LABEL, "a namespace name: lower case letters, digits and '-'"),
]
