"""The numbers of the perf.data format (the kernel's ``tools/perf/Documentation/perf.data-file-format.txt``
and ``include/uapi/linux/perf_event.h``): record types, sample fields, header features."""

from __future__ import annotations

MAGIC = b"PERFILE2"
MAGIC_SWAPPED = b"2ELIFREP"  # a file written on a machine of the other byte order
FILE_HEADER_SIZE = 104  # magic, size, attr_size, attrs, data, event_types, 256 feature bits
PIPE_HEADER_SIZE = 16  # magic, size
EVENT_HEADER_SIZE = 8  # perf_event_header: u32 type, u16 misc, u16 size
MIN_ATTR_SIZE = 64  # PERF_ATTR_SIZE_VER0
MAX_ATTR_SIZE = 4096

# perf_event_attr.type
TYPE_HARDWARE, TYPE_SOFTWARE, TYPE_TRACEPOINT = 0, 1, 2

# perf_event_attr.sample_type bits, in the order a PERF_RECORD_SAMPLE lays them out.
SAMPLE_IP = 1 << 0
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_ADDR = 1 << 3
SAMPLE_READ = 1 << 4
SAMPLE_CALLCHAIN = 1 << 5
SAMPLE_ID = 1 << 6
SAMPLE_CPU = 1 << 7
SAMPLE_PERIOD = 1 << 8
SAMPLE_STREAM_ID = 1 << 9
SAMPLE_RAW = 1 << 10
SAMPLE_BRANCH_STACK = 1 << 11
SAMPLE_IDENTIFIER = 1 << 16

# perf_event_attr.read_format bits
FORMAT_TOTAL_TIME_ENABLED = 1 << 0
FORMAT_TOTAL_TIME_RUNNING = 1 << 1
FORMAT_ID = 1 << 2
FORMAT_GROUP = 1 << 3
FORMAT_LOST = 1 << 4

# perf_event_attr flag bits
ATTR_FLAG_SAMPLE_ID_ALL = 1 << 18
ATTR_FLAG_USE_CLOCKID = 1 << 25

# perf_event_header.type: the kernel's records, then the perf tool's own (64 and up).
RECORD_NAMES: dict[int, str] = {
    1: "MMAP", 2: "LOST", 3: "COMM", 4: "EXIT", 5: "THROTTLE", 6: "UNTHROTTLE", 7: "FORK", 8: "READ",
    9: "SAMPLE", 10: "MMAP2", 11: "AUX", 12: "ITRACE_START", 13: "LOST_SAMPLES", 14: "SWITCH",
    15: "SWITCH_CPU_WIDE", 16: "NAMESPACES", 17: "KSYMBOL", 18: "BPF_EVENT", 19: "CGROUP",
    20: "TEXT_POKE", 21: "AUX_OUTPUT_HW_ID",
    64: "HEADER_ATTR", 65: "HEADER_EVENT_TYPE", 66: "HEADER_TRACING_DATA", 67: "HEADER_BUILD_ID",
    68: "FINISHED_ROUND", 69: "ID_INDEX", 70: "AUXTRACE_INFO", 71: "AUXTRACE", 72: "AUXTRACE_ERROR",
    73: "THREAD_MAP", 74: "CPU_MAP", 75: "STAT_CONFIG", 76: "STAT", 77: "STAT_ROUND",
    78: "EVENT_UPDATE", 79: "TIME_CONV", 80: "HEADER_FEATURE", 81: "COMPRESSED", 82: "FINISHED_INIT",
}  # fmt: skip
RECORD_LOST = 2
RECORD_COMM = 3
RECORD_SAMPLE = 9
RECORD_LOST_SAMPLES = 13
FIRST_USER_RECORD = 64
RECORD_HEADER_ATTR = 64
RECORD_HEADER_TRACING_DATA = 66
RECORD_HEADER_BUILD_ID = 67
RECORD_FINISHED_ROUND = 68
RECORD_AUXTRACE = 71
RECORD_HEADER_FEATURE = 80
RECORD_COMPRESSED = 81

# Header feature bits (perf_file_header.adds_features; HEADER_FEATURE records in pipe mode).
FEATURE_NAMES: dict[int, str] = {
    1: "TRACING_DATA", 2: "BUILD_ID", 3: "HOSTNAME", 4: "OSRELEASE", 5: "VERSION", 6: "ARCH",
    7: "NRCPUS", 8: "CPUDESC", 9: "CPUID", 10: "TOTAL_MEM", 11: "CMDLINE", 12: "EVENT_DESC",
    13: "CPU_TOPOLOGY", 14: "NUMA_TOPOLOGY", 15: "BRANCH_STACK", 16: "PMU_MAPPINGS",
    17: "GROUP_DESC", 18: "AUXTRACE", 19: "STAT", 20: "CACHE", 21: "SAMPLE_TIME",
    22: "MEM_TOPOLOGY", 23: "CLOCKID", 24: "DIR_FORMAT", 25: "BPF_PROG_INFO", 26: "BPF_BTF",
    27: "COMPRESSED", 28: "CPU_PMU_CAPS", 29: "CLOCK_DATA", 30: "HYBRID_TOPOLOGY", 31: "PMU_CAPS",
}  # fmt: skip
FEATURE_TRACING_DATA = 1
FEATURE_BUILD_ID = 2
FEATURE_HOSTNAME = 3
FEATURE_OSRELEASE = 4
FEATURE_VERSION = 5
FEATURE_ARCH = 6
FEATURE_NRCPUS = 7
FEATURE_CMDLINE = 11
FEATURE_EVENT_DESC = 12
FEATURE_SAMPLE_TIME = 21
FEATURE_CLOCKID = 23
FEATURE_CLOCK_DATA = 29
FEATURE_BITS = 256
STRING_FEATURES = (FEATURE_HOSTNAME, FEATURE_OSRELEASE, FEATURE_VERSION, FEATURE_ARCH)

PERF_RECORD_MISC_BUILD_ID_SIZE = 1 << 15

TRACING_MAGIC = b"\x17\x08\x44tracing"

__all__ = [name for name in dir() if name.isupper()]
