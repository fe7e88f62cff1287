"""The logging bridge against a real private service: records become TraceLogging events in a
session's file with the right level and fields; nothing is formatted when no session listens."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import openetw
from openetw.controller import Session
from openetw.guids import provider_guid_from_name
from openetw.provider.logging_handler import DEFAULT_PROVIDER_NAME, EtwLoggingHandler, etw_level
from tests.service.harness import ServiceProcess, decoded, read_events


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Counted:
    """A message argument that counts how often it is turned into text."""

    def __init__(self) -> None:
        self.formatted = 0

    def __str__(self) -> str:
        self.formatted += 1
        return "counted"


class Opaque:
    def __str__(self) -> str:
        return "<opaque thing>"


@pytest.fixture
def logger(request: pytest.FixtureRequest) -> Iterator[logging.Logger]:
    log = logging.getLogger(f"openetw.test.{request.node.name}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    try:
        yield log
    finally:
        for handler in list(log.handlers):
            log.removeHandler(handler)
            handler.close()


def test_etw_levels_follow_logging_levels() -> None:
    assert [etw_level(n) for n in (50, 40, 30, 20, 10, 0)] == [1, 2, 3, 4, 5, 5]
    assert etw_level(25) == 4 and etw_level(45) == 2 and etw_level(60) == 1


def test_provider_name_comes_from_the_logger_unless_given(service_env: Path, logger: logging.Logger) -> None:
    handler = EtwLoggingHandler.install(logger)
    assert handler in logger.handlers
    assert handler.provider.name == logger.name
    assert handler.provider.guid == provider_guid_from_name(logger.name)
    named = EtwLoggingHandler("MyCompany.MyApp", logger=logger)
    root = EtwLoggingHandler()
    try:
        assert named.provider.name == "MyCompany.MyApp"
        assert root.provider.name == DEFAULT_PROVIDER_NAME
    finally:
        named.close()
        root.close()
    assert openetw.EtwLoggingHandler is EtwLoggingHandler


def test_records_reach_the_session_file_with_level_and_fields(service: ServiceProcess, tmp_path: Path, logger: logging.Logger) -> None:
    handler = EtwLoggingHandler.install(logger, provider_name="Test.Logging.Records")
    output = tmp_path / "log.etl"
    with Session.start("LogRecords", output=output) as session:
        session.enable("Test.Logging.Records", level=5)
        assert wait_for(lambda: handler.provider.enabled)
        logger.warning("slow query took %d ms", 812, extra={"ms": 812, "ratio": 0.25, "user": "ann", "thing": Opaque(), "line": "x"})
        try:
            1 / 0  # noqa: B018
        except ZeroDivisionError:
            logger.exception("division failed")
        logger.info("plain info")
        logger.debug("details %s", "here")
        logger.critical("the end")
    records = read_events(output)
    events = decoded(records)
    assert [r.level for r in records] == [3, 2, 4, 5, 1]
    assert {provider for provider, _, _ in events} == {"Test.Logging.Records"}
    assert {name for _, name, _ in events} == {logger.name}
    warning, error, info, debug, critical = (fields for _, _, fields in events)
    assert warning["logger"] == logger.name
    assert warning["message"] == "slow query took 812 ms"
    assert warning["level"] == "WARNING"
    assert warning["file"] == __file__
    assert warning["function"] == "test_records_reach_the_session_file_with_level_and_fields"
    assert isinstance(warning["line"], int) and warning["line"] > 0
    assert (warning["ms"], warning["ratio"], warning["user"], warning["thing"]) == (812, 0.25, "ann", "<opaque thing>")
    assert warning["extra_line"] == "x"  # an extra named like a standard field is renamed
    assert "exception" not in warning
    assert error["level"] == "ERROR" and error["message"] == "division failed"
    assert "ZeroDivisionError: division by zero" in error["exception"]
    assert info["message"] == "plain info" and debug["message"] == "details here"
    assert critical["level"] == "CRITICAL"


def _record(logger: logging.Logger, level: int, message: str, *args: object) -> logging.LogRecord:
    return logger.makeRecord(logger.name, level, __file__, 1, message, args, None)


def test_a_handler_nobody_listens_to_formats_nothing(service: ServiceProcess, tmp_path: Path, logger: logging.Logger) -> None:
    # Records go to the handler itself: other handlers (pytest's) format what they get.
    handler = EtwLoggingHandler(provider_name="Test.Logging.Levels", event_name="AppLog", keyword=0x10)
    argument = Counted()
    try:
        assert handler.handle(_record(logger, logging.ERROR, "no session: %s", argument)) is False
        assert argument.formatted == 0
        output = tmp_path / "levels.etl"
        with Session.start("LogLevels", output=output) as session:
            session.enable("Test.Logging.Levels", level=3, any=0x10)
            assert wait_for(lambda: handler.provider.enabled)
            handler.handle(_record(logger, logging.INFO, "below the session's level: %s", argument))
            assert argument.formatted == 0
            handler.handle(_record(logger, logging.WARNING, "taken: %s", argument))
            assert argument.formatted == 1
    finally:
        handler.close()
    events = decoded(read_events(output))
    assert [(name, fields["message"]) for _, name, fields in events] == [("AppLog", "taken: counted")]


def test_a_keyword_the_session_does_not_ask_for_is_not_written(service: ServiceProcess, tmp_path: Path, logger: logging.Logger) -> None:
    handler = EtwLoggingHandler(provider_name="Test.Logging.Keywords", keyword=0x20)
    output = tmp_path / "keywords.etl"
    try:
        with Session.start("LogKeywords", output=output) as session:
            session.enable("Test.Logging.Keywords", level=5, any=0x10)
            assert wait_for(lambda: handler.provider.enabled)
            argument = Counted()
            handler.handle(_record(logger, logging.ERROR, "not for this session: %s", argument))
            assert argument.formatted == 0
    finally:
        handler.close()
    assert read_events(output) == []
