"""The Windows Event Log file format (``.evtx``): read every record, render it, write new files.

Pure: bytes in, records out, and the reverse. ``EvtxReader(data)`` yields ``EvtxRecord``s (the
``EventRecord`` of kind ``evtx``) and reports damage in ``errors``; ``record.xml()`` renders what
``wevtutil qe /f:xml`` prints; ``EvtxWriter`` builds file images from records.
"""

from __future__ import annotations

from openetw.errors import EvtxFormatError
from openetw.evtx.reader import ChunkInfo, EvtxReader, FileHeader, ReadStatistics, read_file_header
from openetw.evtx.record import EvtxHeader, EvtxRecord
from openetw.evtx.writer import EvtxWriter

__all__ = [
    "ChunkInfo",
    "EvtxFormatError",
    "EvtxHeader",
    "EvtxReader",
    "EvtxRecord",
    "EvtxWriter",
    "FileHeader",
    "ReadStatistics",
    "read_file_header",
]
