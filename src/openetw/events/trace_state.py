"""The trace's state over time: processes, threads, images, their PDB identities, .NET methods.

One tracker for every application that names things from a trace. ``TraceState`` is a
``DecodeContext`` (which learns processes, threads, images and the manifests a trace carries,
because decoding itself needs process names) and learns, besides:

* each image's PDB identity (GUID, age, PDB name) from KernelTraceControl ``ImageID/DbgID_RSDS``
  records, which xperf and PerfView merge in after each Image DCStart/Load;
* the .NET runtime's JIT-compiled methods: address range, namespace and name, from
  ``Method/LoadVerbose`` and ``Method/UnloadVerbose`` (Microsoft-Windows-DotNETRuntime) and the
  rundown's ``Method/DCStartVerbose`` and ``Method/DCStopVerbose``, with their modules'
  IL paths from the ``Loader/Module*`` events;
* the GNU build id of each ELF image of an openetw Linux trace (``ImageBuildId/BuildId``);
* the kernel symbols an openetw Linux trace records when it stops (``KernelSymbols/Symbol``:
  the kallsyms symbols its samples' kernel frames fell in);
* fast lookups of the image or method holding an address in a process at a time (a sorted
  index per process, built when first asked after a change).

Rundown describes what existed all along: a method or image known from rundown holds from the
start of the trace; a load holds from its time, an unload ends it.
"""

from __future__ import annotations

import bisect
import ntpath
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from openetw.symbols.table import SymbolTable
from openetw.tdh.context import DecodeContext, ImageInfo
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import Schema

__all__ = ["ImageIdentity", "ManagedMethod", "TraceState", "module_name", "names_frames"]

_IMAGE_ID_CLASS = uuid.UUID("b3e675d7-2554-4f18-830b-2762732560de").bytes_le
_KERNEL_SYMBOLS_CLASS = uuid.UUID("0e6c4d7a-51b1-4c0e-9f3e-6f70656e6574").bytes_le  # openetw's KernelSymbols
_KERNEL_SYMBOL = 32
_IMAGE_BUILD_ID_CLASS = uuid.UUID("0e6c4d7a-51b1-4c0e-9f3e-6f70656e6575").bytes_le  # openetw's ImageBuildId
_BUILD_ID = 32
_DBG_ID_RSDS = 36
_CLR_RUNTIME = uuid.UUID("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4").bytes_le
_CLR_RUNDOWN = uuid.UUID("a669021c-c450-4609-a035-5af59af4df18").bytes_le
_METHOD_LOAD, _METHOD_UNLOAD = 143, 144  # LoadVerbose/UnloadVerbose; rundown: DCStartVerbose/DCStopVerbose
_RUNTIME_MODULES = frozenset({151, 152, 153})  # DomainModuleLoad, ModuleLoad, ModuleUnload
_RUNDOWN_MODULES = frozenset({151, 152, 153, 154})  # (DomainModule|Module)DC(Start|Stop)
_EARLIEST = -(1 << 62)
_LATEST = 1 << 62
_SCAN_BACK = 64  # entries looked at below an address before giving up (ranges rarely nest)
_BINARY_SUFFIXES = (".dll", ".exe", ".sys", ".ni", ".winmd", ".drv", ".ocx")


_KERNEL_KINDS = frozenset({"system", "compact", "perfinfo"})
_IMAGE_GROUP, _PROCESS_GROUP, _IMAGE_LOAD = 0x14, 0x03, 10
_NAMING_CLASSES = frozenset({_IMAGE_ID_CLASS, _KERNEL_SYMBOLS_CLASS, _IMAGE_BUILD_ID_CLASS})


def names_frames(record: Any) -> bool:
    """Whether ``record`` is one naming frames reads from (an image event, an image's PDB
    identity or build id, a kernel symbol, a .NET method or module event): a first pass that
    learns only what names frames observes those alone."""
    kind = record.kind
    if kind in _KERNEL_KINDS:
        group = (record.hook_id or 0) >> 8
        return group == _IMAGE_GROUP or (group == _PROCESS_GROUP and record.opcode == _IMAGE_LOAD)
    if kind == "event":
        return record.provider_guid_bytes in (_CLR_RUNTIME, _CLR_RUNDOWN)
    return kind in ("classic", "instance") and record.provider_guid_bytes in _NAMING_CLASSES


def module_name(path: str) -> str:
    """How a frame names its module: the file name, without a Windows binary's extension
    (``C:\\Windows\\System32\\ntdll.dll`` → ``ntdll``; ``/usr/lib/libc.so.6`` stays ``libc.so.6``)."""
    base = ntpath.basename(path.rstrip("\\/")) if "\\" in path else path.rsplit("/", 1)[-1]
    lowered = base.lower()
    for _ in range(2):  # mscorlib.ni.dll → mscorlib
        for suffix in _BINARY_SUFFIXES:
            if lowered.endswith(suffix) and len(base) > len(suffix):
                base, lowered = base[: -len(suffix)], lowered[: -len(suffix)]
                break
    return base or path


@dataclass(frozen=True, slots=True)
class ImageIdentity:
    """The PDB an image was built with (CodeView RSDS record): GUID, age and file name."""

    guid: uuid.UUID
    age: int
    pdb_name: str

    @property
    def key(self) -> str:
        """The symbol store's directory name: GUID as 32 upper-case hex digits, then the age in hex."""
        return f"{self.guid.hex.upper()}{self.age:X}"


@dataclass(slots=True)
class ManagedMethod:
    """A JIT-compiled .NET method: ``size`` bytes of code at ``start`` in process ``pid``."""

    pid: int
    start: int
    size: int
    namespace: str
    name: str
    module_id: int
    loaded: int = _EARLIEST
    unloaded: int = _LATEST

    @property
    def lifetime(self) -> tuple[int, int]:
        return self.loaded, self.unloaded

    @property
    def full_name(self) -> str:
        return f"{self.namespace}.{self.name}" if self.namespace else self.name


class _ImageSpan:
    __slots__ = ("image",)

    def __init__(self, image: ImageInfo) -> None:
        self.image = image

    @property
    def lifetime(self) -> tuple[int, int]:
        return self.image.start, self.image.end


class _RangeIndex:
    """Address ranges of one process (images or methods, each with a lifetime), looked up by
    address and time. The lifetimes are read at lookup, so an unload seen later counts."""

    __slots__ = ("entries", "starts", "dirty")

    def __init__(self) -> None:
        self.entries: list[tuple[int, int, Any]] = []
        self.starts: list[int] = []
        self.dirty = False

    def add(self, start: int, size: int, value: Any) -> None:
        self.entries.append((start, size, value))
        self.dirty = True

    def find(self, address: int, when: int | None) -> Any:
        """The range holding ``address`` that lives at ``when`` (the latest begun, when several)."""
        if self.dirty:
            self.entries.sort(key=lambda entry: entry[0])
            self.starts = [entry[0] for entry in self.entries]
            self.dirty = False
        index = bisect.bisect_right(self.starts, address) - 1
        stop = max(-1, index - _SCAN_BACK)
        best: Any = None
        while index > stop:
            start, size, value = self.entries[index]
            if address < start + size:
                begin, end = value.lifetime
                if (when is None or begin <= when <= end) and (best is None or begin > best.lifetime[0]):
                    best = value
            index -= 1
        return best


class TraceState(DecodeContext):
    """Processes, threads and images by time (see ``DecodeContext``), plus PDB identities of
    images and .NET methods. Feed records in time order (``observe``, or ``learn`` for a whole
    trace), then ask."""

    def __init__(self, registry: SchemaRegistry | None = None, *, learn_manifests: bool = True, learn_threads: bool = True) -> None:
        super().__init__(registry, learn_manifests=learn_manifests, learn_threads=learn_threads)
        self._identities: dict[tuple[int, int], ImageIdentity] = {}
        self._identity_by_base: dict[int, ImageIdentity] = {}
        self._methods: dict[int, _RangeIndex] = {}
        self._open_methods: dict[tuple[int, int], ManagedMethod] = {}
        self._module_paths: dict[tuple[int, int], str] = {}
        self._image_index: dict[int, _RangeIndex] = {}
        self._indexed_images: dict[int, int] = {}
        self.methods_learned = 0
        self._kernel_symbols: list[tuple[int, int, str]] = []
        self._kernel_table: SymbolTable | None = None
        self._build_ids: dict[tuple[int, int], str] = {}

    def learn(self, records: Iterable[Any]) -> TraceState:
        for record in records:
            self.observe(record)
        return self

    def observe(self, record: Any, decoded: Mapping[str, Any] | None = None, *, schema: Schema | None = None) -> None:
        super().observe(record, decoded, schema=schema)
        kind = record.kind
        if kind == "event":
            guid = record.provider_guid_bytes
            if guid in (_CLR_RUNTIME, _CLR_RUNDOWN):
                event_id = record.id
                if event_id in (_METHOD_LOAD, _METHOD_UNLOAD):
                    self._clr_method(record, rundown=guid == _CLR_RUNDOWN)
                elif event_id in (_RUNDOWN_MODULES if guid == _CLR_RUNDOWN else _RUNTIME_MODULES):
                    self._clr_module(record)
        elif kind in ("classic", "instance"):
            guid = record.provider_guid_bytes
            if record.opcode == _DBG_ID_RSDS and guid == _IMAGE_ID_CLASS:
                self._dbg_id(record)
            elif record.opcode == _KERNEL_SYMBOL and guid == _KERNEL_SYMBOLS_CLASS:
                self._kernel_symbol(record)
            elif record.opcode == _BUILD_ID and guid == _IMAGE_BUILD_ID_CLASS:
                self._build_id(record)

    # -- PDB identities ----------------------------------------------------------------------
    def _dbg_id(self, record: Any) -> None:
        props = self._decode(record)
        if props is None:
            return
        base, guid, age, name = props.get("ImageBase"), props.get("GuidSig"), props.get("Age"), props.get("PDBFileName")
        if not isinstance(base, int) or not isinstance(guid, uuid.UUID) or not isinstance(age, int) or not isinstance(name, str):
            return
        identity = ImageIdentity(guid, age, name)
        pid = props.get("ProcessId")
        self._identities[(pid if isinstance(pid, int) else record.pid, base)] = identity
        self._identity_by_base.setdefault(base, identity)

    def identity(self, image: ImageInfo) -> ImageIdentity | None:
        """The PDB identity the trace gives for ``image`` (by process and base, else by base)."""
        return self._identities.get((image.pid, image.base)) or self._identity_by_base.get(image.base)

    def _build_id(self, record: Any) -> None:
        props = self._decode(record)
        if props is None:
            return
        base, pid, build_id = props.get("ImageBase"), props.get("ProcessId"), props.get("BuildId")
        if isinstance(base, int) and isinstance(pid, int) and isinstance(build_id, (bytes, bytearray)) and build_id:
            self._build_ids[(pid, base)] = bytes(build_id).hex()

    def build_id(self, image: ImageInfo) -> str | None:
        """The GNU build id the trace recorded for ``image`` (hex), if any."""
        return self._build_ids.get((image.pid, image.base))

    # -- kernel symbols recorded in the trace -----------------------------------------------
    def _kernel_symbol(self, record: Any) -> None:
        props = self._decode(record)
        if props is None:
            return
        address, size, name = props.get("Address"), props.get("Size"), props.get("Name")
        if isinstance(address, int) and isinstance(size, int) and isinstance(name, str) and name:
            self._kernel_symbols.append((address, size, name))
            self._kernel_table = None

    def kernel_symbols(self) -> SymbolTable | None:
        """The kernel symbols the trace recorded (absolute addresses), if any."""
        if not self._kernel_symbols:
            return None
        if self._kernel_table is None:
            self._kernel_table = SymbolTable(self._kernel_symbols)
        return self._kernel_table

    # -- .NET methods ------------------------------------------------------------------------
    def _clr_module(self, record: Any) -> None:
        props = self._decode(record)
        if props is None:
            return
        module, path = props.get("ModuleID"), props.get("ModuleILPath")
        if isinstance(module, int) and isinstance(path, str) and path:
            self._module_paths.setdefault((record.pid, module), path)

    def _clr_method(self, record: Any, *, rundown: bool) -> None:
        props = self._decode(record)
        if props is None:
            return
        start, size = props.get("MethodStartAddress"), props.get("MethodSize")
        if not isinstance(start, int) or not isinstance(size, int) or size <= 0:
            return
        pid, when = record.pid, record.filetime
        key = (pid, start)
        known = self._open_methods.get(key)
        if record.id == _METHOD_LOAD or known is None:
            namespace, name, module = props.get("MethodNamespace"), props.get("MethodName"), props.get("ModuleID")
            method = ManagedMethod(
                pid, start, size, namespace if isinstance(namespace, str) else "", name if isinstance(name, str) else "?",
                module if isinstance(module, int) else 0, _EARLIEST if rundown else when,
            )
            if known is not None and known.unloaded == _LATEST:
                known.unloaded = when - 1  # the address was given to another method
            self._open_methods[key] = method
            self._methods.setdefault(pid, _RangeIndex()).add(start, size, method)
            self.methods_learned += 1
            known = method
        if record.id == _METHOD_UNLOAD and not rundown and known.unloaded == _LATEST:
            known.unloaded = when

    def method_at(self, pid: int, address: int, when: int | None = None) -> ManagedMethod | None:
        """The JIT-compiled method of process ``pid`` whose code holds ``address`` at ``when``."""
        index = self._methods.get(pid)
        if index is None:
            return None
        method: ManagedMethod | None = index.find(address, when)
        return method

    def method_module(self, method: ManagedMethod) -> str | None:
        """The IL path of ``method``'s module, when the trace names it."""
        return self._module_paths.get((method.pid, method.module_id))

    # -- images ------------------------------------------------------------------------------
    def image_at(self, pid: int, address: int, when: int | None = None) -> ImageInfo | None:
        """The image of process ``pid`` (or of the kernel, pid 0) holding ``address`` at ``when``."""
        for owner in (pid, 0) if pid else (0,):
            images = self._images.get(owner)
            if not images:
                continue
            index = self._image_index.get(owner)
            if index is None or self._indexed_images.get(owner) != len(images):
                index = self._image_index[owner] = _RangeIndex()
                for image in images:
                    index.add(image.base, image.size, _ImageSpan(image))
                self._indexed_images[owner] = len(images)
            found: _ImageSpan | None = index.find(address, when)
            if found is not None:
                return found.image
        return None
