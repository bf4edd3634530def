"""Attribute values: frozen dataclasses of JSON-serialisable fields, enums and dtypes.

``encode``/``decode`` turn them into JSON and back exactly; only types registered here
(``serializable``) can come back from a file, so loading never constructs arbitrary objects.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, TypeVar

from ..core.dtype import DType, dtype_from_name
from ..core.errors import SerializationError

_CLASSES: dict[str, type] = {}
T = TypeVar("T", bound=type)


def serializable(cls: T) -> T:
    """Register a frozen dataclass or an enum so that saved graphs can hold it."""
    if cls.__name__ in _CLASSES and _CLASSES[cls.__name__] is not cls:
        raise SerializationError(f"two serialisable classes are named {cls.__name__}")
    _CLASSES[cls.__name__] = cls
    return cls


def encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"__float__": repr(value)}
    if isinstance(value, DType):
        return {"__dtype__": value.name}
    if isinstance(value, enum.Enum):
        return {"__enum__": type(value).__name__, "value": value.name}
    if isinstance(value, (tuple, list)):
        return {"__tuple__": [encode(v) for v in value]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__attrs__": type(value).__name__, "fields": fields}
    raise SerializationError(f"cannot serialise attribute value {value!r} of type {type(value).__name__}")


def decode(data: Any) -> Any:
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        raise SerializationError("bare JSON list in attributes")
    if not isinstance(data, dict):
        raise SerializationError(f"unexpected attribute value {data!r}")
    if "__float__" in data:
        return float(data["__float__"])
    if "__dtype__" in data:
        return dtype_from_name(data["__dtype__"])
    if "__tuple__" in data:
        return tuple(decode(v) for v in data["__tuple__"])
    if "__enum__" in data:
        cls = _lookup(data["__enum__"])
        try:
            return cls[data["value"]]  # type: ignore[index]
        except KeyError:
            raise SerializationError(f"{data['__enum__']} has no member {data['value']!r}") from None
    if "__attrs__" in data:
        cls = _lookup(data["__attrs__"])
        try:
            return cls(**{k: decode(v) for k, v in data["fields"].items()})
        except TypeError as e:
            raise SerializationError(f"bad fields for {cls.__name__}: {e}") from None
    raise SerializationError(f"unexpected attribute object {data!r}")


def _lookup(name: str) -> type:
    try:
        return _CLASSES[name]
    except KeyError:
        raise SerializationError(f"unknown attribute class {name!r}") from None
