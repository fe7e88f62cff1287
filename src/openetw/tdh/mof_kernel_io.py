"""Layouts of the NT Kernel Logger's I/O classes: DiskIo, FileIo, TcpIp, UdpIp, Registry,
SplitIo, ALPC, Object, and the real-time lost-event class.

FileIo changed at V3: the thread id moved behind the file pointers and shrank from a
pointer to a u32. TcpIp/UdpIp V2 put ``seqnum`` before ``connid``, and ``connid`` is
pointer-sized (the corpus' x64 records are 56/64 bytes, which only fits an 8-byte connid).
"""

from __future__ import annotations

import uuid

from openetw.tdh.mof_kernel_core import KERNEL, TDH_KERNEL
from openetw.tdh.mof_kernel_types import (
    ANSISTRING,
    BINARY,
    HEXINT32,
    HEXINT64,
    INT16,
    INT64,
    IPV4,
    IPV6,
    NTSTATUS,
    POINTER,
    PORT,
    UINT16,
    UINT32,
    UINT64,
    UNICODESTRING,
    MofClass,
    MofEvent,
    versions,
)
from openetw.tdh.mof_kernel_types import (
    MofField as F,
)

# --- DiskIo (group 1; PerfView's task "DiskIO") ----------------------------------------------

_DISK_V2 = (
    F("DiskNumber", UINT32),
    F("IrpFlags", UINT32, HEXINT32),
    F("TransferSize", UINT32),
    F("Reserved", UINT32),
    F("ByteOffset", INT64),
    F("FileKey", POINTER),  # TDH: FileObject
    F("Irp", POINTER),
    F("HighResResponseTime", INT64),
)
_DISK_FLUSH_V2 = (
    F("DiskNumber", UINT32),
    F("IrpFlags", UINT32, HEXINT32),
    F("HighResResponseTime", INT64),
    F("Irp", POINTER),
)
_ISSUER = (F("IssuingThreadId", UINT32),)
_DISK_IO_OPS = {10: "Read", 11: "Write"}
_DISK_INIT_OPS = {12: "ReadInit", 13: "WriteInit", 15: "FlushInit"}

DISK_IO = MofClass(
    uuid.UUID("3d6fa8d4-fe05-11d0-9dda-00c04fd7ba7c"), KERNEL, "DiskIO", 0x01,
    versions((2,), _DISK_IO_OPS, _DISK_V2)
    + versions((3,), _DISK_IO_OPS, _DISK_V2 + _ISSUER)
    + versions((2,), _DISK_INIT_OPS, (F("Irp", POINTER),))
    + versions((3,), _DISK_INIT_OPS, (F("Irp", POINTER),) + _ISSUER)
    + versions((2,), {14: "FlushBuffers"}, _DISK_FLUSH_V2)
    + versions((3,), {14: "FlushBuffers"}, _DISK_FLUSH_V2 + _ISSUER)
    + versions((2, 3), {34: "DriverMajorFunctionCall"}, (
        F("MajorFunction", UINT32),
        F("MinorFunction", UINT32),
        F("RoutineAddr", POINTER),
        F("FileKey", POINTER),
        F("Irp", POINTER),
        F("UniqMatchID", UINT32),
    ))
    + versions((2, 3), {35: "DriverMajorFunctionReturn", 53: "DriverCompleteRequestReturn"},
               (F("Irp", POINTER), F("UniqMatchID", UINT32)))
    + versions((2, 3), {37: "DriverCompletionRoutine"},
               (F("Routine", POINTER), F("IrpPtr", POINTER), F("UniqMatchID", UINT32)))
    + versions((2, 3), {52: "DriverCompleteRequest"},
               (F("RoutineAddr", POINTER), F("Irp", POINTER), F("UniqMatchID", UINT32))),
)

# --- FileIo (group 4; PerfView's task "FileIO") ----------------------------------------------

_NAME_OPS = {0: "Name", 32: "FileCreate", 35: "FileDelete", 36: "FileRundown"}
# "FileObject" in the MOF, but it is the key of the file name; PerfView calls it FileKey.
_FILE_NAME = (F("FileKey", POINTER), F("FileName", UNICODESTRING))

_IRP_V2 = (F("IrpPtr", POINTER), F("TTID", POINTER), F("FileObject", POINTER))
_IRP_V3 = (F("IrpPtr", POINTER), F("FileObject", POINTER))
_TTID = F("TTID", UINT32)
_CREATE_FLAGS = (
    F("CreateOptions", UINT32, HEXINT32),
    F("FileAttributes", UINT32, HEXINT32),
    F("ShareAccess", UINT32, HEXINT32),
    F("FileName", UNICODESTRING),  # TDH: OpenPath
)
_SIMPLE_OPS = {65: "Cleanup", 66: "Close", 73: "Flush"}
_RW_OPS = {67: "Read", 68: "Write"}
_INFO_OPS = {69: "SetInfo", 70: "Delete", 71: "Rename", 74: "QueryInfo", 75: "FSControl"}
_DIR_OPS = {72: "DirEnum", 77: "DirNotify"}
_DIR_TAIL = (F("Length", UINT32), F("InfoClass", UINT32), F("FileIndex", UINT32), F("FileName", UNICODESTRING))
_MAP_OPS = {37: "MapFile", 38: "UnmapFile", 39: "MapFileDCStart", 40: "MapFileDCStop"}
_MAP_HEAD = (F("ViewBase", POINTER), F("FileKey", POINTER), F("MiscInfo", UINT64, HEXINT64), F("ViewSize", POINTER))

FILE_IO = MofClass(
    uuid.UUID("90cbdc39-4a3e-11d1-84f4-0000f80464e3"), KERNEL, "FileIO", 0x04,
    versions((0,), {0: "Name"}, _FILE_NAME)
    + versions((1,), {0: "Name", 32: "FileCreate"}, _FILE_NAME)
    + versions((2, 3), _NAME_OPS, _FILE_NAME)
    + versions((2,), {64: "Create"}, _IRP_V2 + _CREATE_FLAGS)
    + versions((3,), {64: "Create"}, _IRP_V3 + (_TTID,) + _CREATE_FLAGS)
    + versions((2,), _SIMPLE_OPS, _IRP_V2 + (F("FileKey", POINTER),))
    + versions((3,), _SIMPLE_OPS, _IRP_V3 + (F("FileKey", POINTER), _TTID))
    + versions((2,), _RW_OPS, (F("Offset", UINT64),) + _IRP_V2 + (
        F("FileKey", POINTER), F("IoSize", UINT32), F("IoFlags", UINT32, HEXINT32),
    ))
    + versions((3,), _RW_OPS, (F("Offset", UINT64),) + _IRP_V3 + (
        F("FileKey", POINTER), _TTID, F("IoSize", UINT32), F("IoFlags", UINT32, HEXINT32),
    ))
    + versions((2,), _INFO_OPS, _IRP_V2 + (F("FileKey", POINTER), F("ExtraInfo", POINTER), F("InfoClass", UINT32)))
    + versions((3,), _INFO_OPS, _IRP_V3 + (
        F("FileKey", POINTER), F("ExtraInfo", POINTER), _TTID, F("InfoClass", UINT32),
    ))
    + versions((3,), {79: "DeletePath", 80: "RenamePath", 81: "SetLinkPath"}, _IRP_V3 + (
        F("FileKey", POINTER), F("ExtraInfo", POINTER), _TTID, F("InfoClass", UINT32),
        F("FileName", UNICODESTRING),
    ), provider_name=TDH_KERNEL)
    + versions((2,), _DIR_OPS, _IRP_V2 + (F("FileKey", POINTER),) + _DIR_TAIL)
    + versions((3,), _DIR_OPS, _IRP_V3 + (F("FileKey", POINTER), _TTID) + _DIR_TAIL)
    + versions((2, 3), {76: "OperationEnd"},
               (F("IrpPtr", POINTER), F("ExtraInfo", POINTER), F("NtStatus", UINT32, NTSTATUS)))
    + versions((2,), _MAP_OPS, _MAP_HEAD + (F("ProcessId", UINT32),))
    + versions((3,), _MAP_OPS, _MAP_HEAD + (F("ByteOffset", UINT64), F("ProcessId", UINT32))),
)

# --- TcpIp (group 6) and UdpIp (group 8) -----------------------------------------------------


def _endpoints(address_type: str, out_type: str) -> tuple[F, ...]:
    size = 16 if address_type == BINARY else None
    return (
        F("PID", UINT32),
        F("size", UINT32),
        F("daddr", address_type, out_type, length=size),
        F("saddr", address_type, out_type, length=size),
        F("dport", UINT16, PORT),
        F("sport", UINT16, PORT),
    )


_V4 = _endpoints(UINT32, IPV4)
_V6 = _endpoints(BINARY, IPV6)
_SEQ_CONN = (F("seqnum", UINT32), F("connid", POINTER))
_SEND_TIMES = (F("startime", UINT32), F("endtime", UINT32))
_CONNECT_OPTIONS = (
    F("mss", UINT16),
    F("sackopt", UINT16),
    F("tsopt", UINT16),
    F("wsopt", UINT16),
    F("rcvwin", UINT32),
    F("rcvwinscale", INT16),
    F("sndwinscale", INT16),
)
_FAIL = (F("Proto", UINT16), F("FailureCode", UINT16))

TCP_IP = MofClass(
    uuid.UUID("9a280ac0-c8e0-11d1-84e2-00c04fb998a2"), KERNEL, "TcpIp", 0x06,
    versions((2,), {10: "Send"}, _V4 + _SEND_TIMES + _SEQ_CONN)
    + versions((2,), {11: "Recv", 13: "Disconnect", 14: "Retransmit", 16: "Reconnect", 18: "TCPCopy"},
               _V4 + _SEQ_CONN)
    + versions((2,), {12: "Connect", 15: "Accept"}, _V4 + _CONNECT_OPTIONS + _SEQ_CONN)
    + versions((2,), {17: "Fail"}, _FAIL)
    + versions((2,), {26: "SendIPV6"}, _V6 + _SEND_TIMES + _SEQ_CONN)
    + versions((2,), {27: "RecvIPV6", 29: "DisconnectIPV6", 30: "RetransmitIPV6", 32: "ReconnectIPV6",
                      34: "TCPCopyIPV6"}, _V6 + _SEQ_CONN)
    + versions((2,), {28: "ConnectIPV6", 31: "AcceptIPV6"}, _V6 + _CONNECT_OPTIONS + _SEQ_CONN),
)

UDP_IP = MofClass(
    uuid.UUID("bf3a50c5-a9c9-4988-a005-2df0b7c80f80"), KERNEL, "UdpIp", 0x08,
    versions((0,), {10: "Send", 11: "Recv"}, (
        F("context", POINTER),
        F("saddr", UINT32, IPV4),
        F("sport", UINT16, PORT),
        F("size", UINT16),
        F("daddr", UINT32, IPV4),
        F("dport", UINT16, PORT),
        F("dsize", UINT16),
    ))
    + versions((1,), {10: "Send", 11: "Recv"}, _V4)
    # PerfView keeps the V0 field names for V2 IPv4 sends/receives and so shows PID and size
    # fused into "context"; the V2 layout is the TcpIp one.
    + versions((2,), {10: "Send", 11: "Recv"}, _V4 + _SEQ_CONN)
    + versions((2,), {17: "Fail"}, _FAIL)
    + versions((2,), {26: "SendIPV6", 27: "RecvIPV6"}, _V6 + _SEQ_CONN),
)

# --- Registry (group 9) ----------------------------------------------------------------------

_REGISTRY_OPS = {
    10: "Create", 11: "Open", 12: "Delete", 13: "Query", 14: "SetValue", 15: "DeleteValue",
    16: "QueryValue", 17: "EnumerateKey", 18: "EnumerateValueKey", 19: "QueryMultipleValue",
    20: "SetInformation", 21: "Flush", 22: "KCBCreate", 23: "KCBDelete", 24: "KCBRundownBegin",
    25: "KCBRundownEnd", 26: "Virtualize", 27: "Close",
}

REGISTRY = MofClass(
    uuid.UUID("ae53722e-c863-11d2-8659-00c04fa321a1"), KERNEL, "Registry", 0x09,
    versions((2,), _REGISTRY_OPS, (
        F("InitialTime", INT64),
        F("Status", UINT32, NTSTATUS),
        F("Index", UINT32),
        F("KeyHandle", POINTER),
        F("KeyName", UNICODESTRING),
    )),
)

# --- SplitIo, ALPC, Object, lost events --------------------------------------------------------

SPLIT_IO = MofClass(
    uuid.UUID("d837ca92-12b9-44a5-ad6a-3a65b3578aa8"), KERNEL, "SplitIo", 0x1B,
    versions((0, 2), {32: "VolMgr"}, (F("ParentIrp", POINTER), F("ChildIrp", POINTER))),
)

_MESSAGE = (F("MessageID", UINT32),)
ALPC = MofClass(
    uuid.UUID("45d8cccd-539f-4b72-a8b7-5c683142609a"), KERNEL, "ALPC", 0x1A,
    versions((0, 2), {33: "SendMessage", 34: "ReceiveMessage", 35: "WaitForReply"}, _MESSAGE)
    + versions((0, 2), {36: "WaitForNewMessage"}, (F("IsServerPort", UINT32), F("PortName", ANSISTRING)))
    + versions((0, 2), {37: "Unwait"}, (F("Status", UINT32, NTSTATUS),)),
)

_HANDLE = (F("Object", POINTER), F("Handle", UINT32, HEXINT32), F("ObjectType", UINT16))
OBJECT = MofClass(
    uuid.UUID("89497f50-effe-4440-8cf2-ce6b1cdcaca7"), KERNEL, "Object", 0x11,
    versions((2,), {32: "CreateHandle", 33: "CloseHandle"}, _HANDLE + (F("ObjectName", UNICODESTRING),))
    + versions((2,), {34: "DuplicateHandle"}, (
        F("Object", POINTER),
        F("SourceHandle", UINT32, HEXINT32),
        F("TargetHandle", UINT32, HEXINT32),
        F("TargetProcessID", UINT32),
        F("ObjectType", UINT16),
        F("SourceProcessID", UINT32),
    ))
    + versions((2,), {37: "TypeDCEnd"}, (
        F("ObjectType", UINT16), F("Reserved", UINT16), F("ObjectTypeName", UNICODESTRING),
    ))
    + versions((2,), {39: "HandleDCEnd"}, (
        F("Object", POINTER), F("ProcessId", UINT32), F("Handle", UINT32, HEXINT32), F("ObjectType", UINT16),
        F("ObjectName", UNICODESTRING),
    )),
)

# Delivered to real-time consumers only; PerfView names opcode 32 by its task alone.
LOST_EVENT = MofClass(
    uuid.UUID("6a399ae0-4bc6-4de9-870b-3657f8947e7e"), KERNEL, "LostEvent", None,
    (
        MofEvent(32, 0, "", ()),
        MofEvent(33, 0, "RTLostBuffer", (), provider_name=TDH_KERNEL),
        MofEvent(34, 0, "RTLostFile", (), provider_name=TDH_KERNEL),
    ),
)

IO_CLASSES = (DISK_IO, FILE_IO, TCP_IP, UDP_IP, REGISTRY, SPLIT_IO, ALPC, OBJECT, LOST_EVENT)
