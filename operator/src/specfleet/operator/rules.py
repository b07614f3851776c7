"""A rule of the API, declared once: the CEL rule the API server runs at admission, the
Python check `specfleet validate` and the operator run, the message both say (naming
the field it blames) and the manifests it refuses, which the tests run through both.

The predicate is spelled twice, in CEL and in Python, side by side in one object; the
refusals and the shipped examples are run through pydantic offline, through the API
server's validation code (crdcheck) and through a real API server (e2e), so the two
spellings are held to the same verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Self, TypeVar

from pydantic import BaseModel, GetCoreSchemaHandler, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

M = TypeVar("M")

# The pydantic error type of a broken rule; its context carries the field it blames.
ERROR_TYPE = "rule"


def cel_validation(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    """One entry of a schema's `x-kubernetes-validations`."""
    validation = {"rule": rule, "message": message}
    if field_path:
        validation["fieldPath"] = field_path
    return validation


# In a refusal's changes: remove the field.
DELETE: Any = object()


@dataclass(frozen=True)
class Refusal:
    """A manifest the rule refuses: the P-EAGLE example changed at dotted paths."""

    id: str
    changes: Mapping[str, Any]


class CheckedAnnotation:
    """A pydantic annotation (`Annotated[T, marker]`) that runs `check` on a value after
    its type's validation, so pydantic says in words what admission checks."""

    def check(self, value: Any) -> Any:
        raise NotImplementedError

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per rule
class Rule(CheckedAnnotation, Generic[M]):
    """A rule over one object of the API (`self` in CEL; the model or field value in
    Python). Offline the message goes on with what was found, when `found` says it."""

    cel: str
    message: str
    holds: Callable[[M], bool]
    blames: str | None = None  # the field, relative to the object: CEL's fieldPath
    found: Callable[[M], str] | None = None
    refusals: tuple[Refusal, ...] = field(default=())

    def validation(self) -> dict[str, str]:
        return cel_validation(self.cel, self.message, self.blames)

    def explain(self, value: M) -> str:
        return f"{self.message} (found {self.found(value)})" if self.found else self.message

    def check(self, value: M) -> M:
        """The value, or a pydantic error saying the message and the field it blames."""
        if not self.holds(value):
            raise PydanticCustomError(
                ERROR_TYPE, "{message}", {"message": self.explain(value), "blames": self.blames}
            )
        return value

    # As an annotation (`Annotated[T, rule]`), a rule checks one field's value.
    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["x-kubernetes-validations"] = [self.validation()]
        return json_schema


def _schema_rules(schema: dict[str, Any], model: type[BaseModel]) -> None:
    rules = getattr(model, "rules", ())
    if rules:
        schema["x-kubernetes-validations"] = [rule.validation() for rule in rules]


class RuledModel(BaseModel):
    """A model whose `rules` reach its CRD schema and run after its fields validate,
    in the order declared; the first broken one is the error (as it was when each
    model raised its own)."""

    rules: ClassVar[tuple[Rule[Any], ...]] = ()
    model_config = {"json_schema_extra": _schema_rules}

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        for rule in type(self).rules:
            rule.check(self)
        return self
