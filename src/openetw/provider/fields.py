"""The payload packer under its former name: it is ``openetw.etl.payload`` now, shared by every
encoder (kept here for one release)."""

from __future__ import annotations

from openetw.etl.payload import (
    FieldSpec,
    InvalidFieldValue,
    PayloadPacker,
    fixed_code,
    inline_text_encoding,
    is_integer_field,
    manifest_field,
    manifest_fields,
)

__all__ = [
    "FieldSpec",
    "InvalidFieldValue",
    "PayloadPacker",
    "fixed_code",
    "inline_text_encoding",
    "is_integer_field",
    "manifest_field",
    "manifest_fields",
]
