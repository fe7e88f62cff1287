"""Session settings: log modes and their file rules, buffer limits, names."""

from __future__ import annotations

import pytest

from openetw.session import InvalidSessionConfig, LogFileMode, LogMode, SessionConfig, SessionKind, resolve_provider


@pytest.mark.parametrize(
    ("settings", "flags"),
    [
        ({"mode": LogMode.SEQUENTIAL_FILE, "file_name": "a.etl"}, 0x1),
        ({"mode": LogMode.SEQUENTIAL_FILE, "file_name": "a.etl", "max_file_mb": 5}, 0x1),
        ({"mode": LogMode.CIRCULAR_FILE, "file_name": "a.etl", "max_file_mb": 5}, 0x2),
        ({"mode": LogMode.NEW_FILE, "file_name": "a-%d.etl", "max_file_mb": 5}, 0x8),
        ({"mode": LogMode.REAL_TIME}, 0x100),
        ({"mode": LogMode.BUFFERING}, 0x400),
        ({"mode": LogMode.FILE_AND_REAL_TIME, "file_name": "a.etl"}, 0x101),
        ({"mode": LogMode.REAL_TIME, "kind": SessionKind.KERNEL}, 0x100 | LogFileMode.SYSTEM_LOGGER_MODE),
    ],
)
def test_valid_modes_and_their_log_file_mode(settings: dict, flags: int) -> None:
    assert SessionConfig("S", **settings).log_file_mode == flags


@pytest.mark.parametrize(
    "settings",
    [
        {"mode": LogMode.SEQUENTIAL_FILE},  # no file
        {"mode": LogMode.CIRCULAR_FILE, "file_name": "a.etl"},  # no size
        {"mode": LogMode.NEW_FILE, "file_name": "a.etl", "max_file_mb": 5},  # no %d
        {"mode": LogMode.NEW_FILE, "file_name": "a-%d-%d.etl", "max_file_mb": 5},
        {"mode": LogMode.REAL_TIME, "file_name": "a.etl"},
        {"mode": LogMode.BUFFERING, "max_file_mb": 5},
        {"buffer_size_kb": 0},
        {"buffer_size_kb": 1025},
        {"minimum_buffers": 0},
        {"minimum_buffers": 10, "maximum_buffers": 9},
        {"flush_timer": -1},
        {"max_file_mb": -1, "mode": LogMode.SEQUENTIAL_FILE, "file_name": "a.etl"},
    ],
)
def test_inconsistent_settings_are_refused(settings: dict) -> None:
    with pytest.raises(InvalidSessionConfig):
        SessionConfig("S", **settings)


@pytest.mark.parametrize("name", ["", "   ", " padded", "nul\0inside", "x" * 1025])
def test_bad_names(name: str) -> None:
    with pytest.raises(InvalidSessionConfig):
        SessionConfig(name)


def test_file_names() -> None:
    assert SessionConfig("S", mode=LogMode.NEW_FILE, file_name="/t/s_%d.etl", max_file_mb=1).file_name_for(12) == "/t/s_12.etl"
    assert SessionConfig("S", mode=LogMode.SEQUENTIAL_FILE, file_name="/t/s.etl").file_name_for(3) == "/t/s.etl"
    with pytest.raises(InvalidSessionConfig):
        SessionConfig("S").file_name_for(1)
    assert SessionConfig("S", buffer_size_kb=8).buffer_size == 8192


def test_mode_properties() -> None:
    assert LogMode.FILE_AND_REAL_TIME.writes_file and LogMode.FILE_AND_REAL_TIME.real_time
    assert not LogMode.BUFFERING.writes_file and not LogMode.BUFFERING.real_time


def test_resolve_provider() -> None:
    guid, name = resolve_provider("MyCompany.MyComponent")
    assert name == "MyCompany.MyComponent"
    assert resolve_provider(str(guid)) == (guid, None)
    assert resolve_provider(guid) == (guid, None)
    with pytest.raises(InvalidSessionConfig):
        resolve_provider("  ")


def _kernel(**settings: object) -> SessionConfig:
    flags = settings.pop("kernel_flags", ("process", "profile"))
    return SessionConfig("K", kind=SessionKind.KERNEL, kernel_flags=flags, **settings)  # type: ignore[arg-type]


def test_a_kernel_session_takes_an_event_source_and_a_profile_rate() -> None:
    assert (_kernel().kernel_source, _kernel().kernel_profile_rate_hz) == ("auto", None)
    assert _kernel(kernel_flags=("process",), kernel_source="Proc-Connector").kernel_source == "proc_connector"
    assert _kernel(kernel_source="tracefs", kernel_profile_rate_hz=500).kernel_profile_rate_hz == 500
    assert _kernel(kernel_profile_rate_hz=1).kernel_profile_rate_hz == 1
    assert _kernel(kernel_profile_rate_hz=100_000).kernel_profile_rate_hz == 100_000


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"kernel_source": "bpf"}, "unknown kernel event source 'bpf'; choose one of auto, tracefs, proc_connector"),
        ({"kernel_source": "perf_children"}, "unknown kernel event source 'perf_children'"),
        ({"kernel_source": 3}, "unknown kernel event source 3"),
        ({"kernel_profile_rate_hz": 0}, "the profile rate must be 1..100000 samples per second, not 0"),
        ({"kernel_profile_rate_hz": 100_001}, "the profile rate must be 1..100000 samples per second, not 100001"),
        ({"kernel_profile_rate_hz": True}, "the profile rate must be 1..100000 samples per second, not True"),
        ({"kernel_flags": ("process",), "kernel_profile_rate_hz": 500}, "a profile rate needs the profile kernel flag"),
        ({"kernel_source": "proc_connector"}, "the proc_connector source records only the process and thread flags, not profile"),
    ],
)
def test_kernel_settings_out_of_range_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSessionConfig) as refused:
        _kernel(**settings)
    assert message in str(refused.value)


def test_only_kernel_sessions_take_kernel_settings() -> None:
    with pytest.raises(InvalidSessionConfig, match="only kernel sessions take a kernel event source"):
        SessionConfig("U", kernel_source="tracefs")
    with pytest.raises(InvalidSessionConfig, match="only kernel sessions take a profile rate"):
        SessionConfig("U", kernel_profile_rate_hz=500)
    assert SessionConfig("U").kernel_source == "auto"


def test_a_kernel_session_says_whose_system_call_arguments_it_records() -> None:
    from openetw.ipc.wire import config_from_json, config_to_json

    config = _kernel(kernel_flags=("syscall", "syscall_args"), kernel_syscall_args=("read", "open*"), kernel_syscall_args_pids=(7, 3),
                     kernel_syscall_args_execnames=("dd",))  # fmt: skip
    assert (config.kernel_syscall_args, config.kernel_syscall_args_pids, config.kernel_syscall_args_execnames) == (("open*", "read"), (3, 7), ("dd",))
    assert config_from_json(config_to_json(config)) == config
    # Unset (the path-taking calls of every process): a peer that knows nothing of them reads the same.
    plain = config_to_json(_kernel(kernel_flags=("syscall_args",)))
    assert not any(key.startswith("kernel_syscall_args") for key in plain)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"kernel_flags": ("syscall",), "kernel_syscall_args": ("read",)}, "need the syscall_args kernel flag"),
        ({"kernel_flags": ("syscall",), "kernel_syscall_args_pids": (5,)}, "need the syscall_args kernel flag"),
        ({"kernel_flags": ("syscall_args",), "kernel_syscall_args_pids": (0,)}, "kernel_syscall_args_pids are process ids"),
        ({"kernel_flags": ("syscall_args",), "kernel_syscall_args_pids": (True,)}, "kernel_syscall_args_pids are process ids"),
        ({"kernel_flags": ("syscall_args",), "kernel_syscall_args_execnames": ("",)}, "kernel_syscall_args_execnames are process names"),
        ({"kernel_flags": ("syscall_args",), "kernel_syscall_args": (3,)}, "kernel_syscall_args are system call names or patterns"),
    ],
)
def test_bad_system_call_argument_settings_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSessionConfig) as refused:
        _kernel(**settings)
    assert message in str(refused.value)
