"""D's types: fixed-width integers, strings, pointers and structs (with ``nt`_EVENT_HEADER``).

Integers are Python ints kept inside their type's range; ``wrap_code`` gives the expression that
brings a value back into range, as C's conversions do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "BASE_TYPE_WORDS", "EVENT_HEADER", "INT", "INT64", "STRING", "UINT64", "VOID", "IntType", "PointerType",
    "StringType", "StructType", "Type", "VoidType", "ArrayType", "base_type", "is_base_type", "arith_type",
]  # fmt: skip


class Type:
    size: int

    def is_int(self) -> bool:
        return False


@dataclass(frozen=True)
class IntType(Type):
    name: str
    size: int
    signed: bool

    def is_int(self) -> bool:
        return True

    def __str__(self) -> str:
        return self.name

    @property
    def struct_code(self) -> str:
        return {1: "b", 2: "h", 4: "i", 8: "q"}[self.size] if self.signed else {1: "B", 2: "H", 4: "I", 8: "Q"}[self.size]


@dataclass(frozen=True)
class StringType(Type):
    size: int = 256

    def __str__(self) -> str:
        return "string"


@dataclass(frozen=True)
class VoidType(Type):
    size: int = 0

    def __str__(self) -> str:
        return "void"


@dataclass(frozen=True)
class PointerType(Type):
    target: Type
    size: int = 8

    def is_int(self) -> bool:
        return True  # pointers take part in arithmetic as addresses

    def __str__(self) -> str:
        return f"{self.target} *"


@dataclass(frozen=True)
class ArrayType(Type):
    element: Type
    count: int

    @property
    def size(self) -> int:  # type: ignore[override]  # noqa: RUF100
        return self.element.size * self.count

    def __str__(self) -> str:
        return f"{self.element}[{self.count}]"


@dataclass(eq=False)
class StructType(Type):
    name: str
    members: dict[str, tuple[Type, int]] = field(default_factory=dict)  # name -> (type, offset)
    size: int = 0
    align: int = 1
    display: str = ""

    def __str__(self) -> str:
        return self.display or f"struct {self.name}"

    def add(self, name: str, ty: Type) -> None:
        align = _alignment(ty)
        offset = (self.size + align - 1) // align * align
        self.members[name] = (ty, offset)
        self.size = offset + ty.size
        self.align = max(self.align, align)

    def finish(self) -> StructType:
        self.size = (self.size + self.align - 1) // self.align * self.align
        return self


def _alignment(ty: Type) -> int:
    if isinstance(ty, StructType):
        return ty.align
    if isinstance(ty, ArrayType):
        return _alignment(ty.element)
    return max(1, min(ty.size, 8))


VOID = VoidType()
STRING = StringType()
CHAR = IntType("char", 1, True)
INT = IntType("int", 4, True)
UINT = IntType("unsigned int", 4, False)
INT64 = IntType("int64_t", 8, True)
UINT64 = IntType("uint64_t", 8, False)

_BASE: dict[str, Type] = {
    "char": CHAR, "signed char": CHAR, "unsigned char": IntType("unsigned char", 1, False),
    "short": IntType("short", 2, True), "unsigned short": IntType("unsigned short", 2, False),
    "int": INT, "signed": INT, "signed int": INT, "unsigned": UINT, "unsigned int": UINT,
    "long": IntType("long", 8, True), "unsigned long": IntType("unsigned long", 8, False),
    "long long": IntType("long long", 8, True), "unsigned long long": IntType("unsigned long long", 8, False),
    "int8_t": IntType("int8_t", 1, True), "uint8_t": IntType("uint8_t", 1, False),
    "int16_t": IntType("int16_t", 2, True), "uint16_t": IntType("uint16_t", 2, False),
    "int32_t": IntType("int32_t", 4, True), "uint32_t": IntType("uint32_t", 4, False),
    "int64_t": INT64, "uint64_t": UINT64,
    "intptr_t": IntType("intptr_t", 8, True), "uintptr_t": IntType("uintptr_t", 8, False),
    "size_t": IntType("size_t", 8, False), "ssize_t": IntType("ssize_t", 8, True),
    "string": STRING, "void": VOID,
}  # fmt: skip
BASE_TYPE_WORDS = frozenset({"signed", "unsigned", "char", "short", "int", "long"})


def is_base_type(word: str) -> bool:
    return word in _BASE or word in BASE_TYPE_WORDS


def base_type(words: str) -> Type | None:
    return _BASE.get(words)


def arith_type(a: Type, b: Type) -> IntType:
    """C's usual arithmetic conversions (everything at least ``int``); pointers act as ``uint64_t``."""
    a = UINT64 if isinstance(a, PointerType) else a
    b = UINT64 if isinstance(b, PointerType) else b
    assert isinstance(a, IntType) and isinstance(b, IntType)
    a = a if a.size >= 4 else INT
    b = b if b.size >= 4 else INT
    if a.size != b.size:
        return a if a.size > b.size else b
    if not a.signed:
        return a
    return b


def _event_header() -> StructType:
    guid = StructType("_GUID")
    guid.add("Data1", _BASE["uint32_t"])
    guid.add("Data2", _BASE["uint16_t"])
    guid.add("Data3", _BASE["uint16_t"])
    guid.add("Data4", ArrayType(_BASE["uint8_t"], 8))
    guid.finish()
    descriptor = StructType("_EVENT_DESCRIPTOR")
    for name, ty in (("Id", "uint16_t"), ("Version", "uint8_t"), ("Channel", "uint8_t"), ("Level", "uint8_t"),
                     ("Opcode", "uint8_t"), ("Task", "uint16_t"), ("Keyword", "uint64_t")):  # fmt: skip
        descriptor.add(name, _BASE[ty])
    descriptor.finish()
    header = StructType("nt`_EVENT_HEADER")
    for name, member in (
        ("Size", _BASE["uint16_t"]), ("HeaderType", _BASE["uint16_t"]), ("Flags", _BASE["uint16_t"]),
        ("EventProperty", _BASE["uint16_t"]), ("ThreadId", _BASE["uint32_t"]), ("ProcessId", _BASE["uint32_t"]),
        ("TimeStamp", _BASE["int64_t"]), ("ProviderId", guid), ("EventDescriptor", descriptor),
        ("KernelTime", _BASE["uint32_t"]), ("UserTime", _BASE["uint32_t"]), ("ActivityId", guid),
    ):  # fmt: skip
        header.add(name, member)
    header.finish()
    assert header.size == 80, header.size
    return header


EVENT_HEADER = _event_header()
"""EVENT_HEADER in its 64-bit form (80 bytes), as a consumer's EVENT_RECORD presents it."""
