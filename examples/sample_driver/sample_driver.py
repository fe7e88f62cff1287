"""The "Sample Driver" of the ETW kernel-mode driver walkthrough, as a Python program.

The manifest (evntdrv.xml) is compiled as Mc.exe compiles it for the C driver, into a module
(checked in under generated/; ``openetw mc evntdrv.xml -o generated`` makes it again)::

    python sample_driver.py [--requests N] [--interval SECONDS] [--generated DIR]

DriverEntry registers the provider (EventRegisterSample_Driver) and writes StartEvent with the
device name's length, the name and the status; each simulated request (an IRP) writes
SampleEventA; the unload routine writes UnloadEvent with the device object's address and
unregisters (EventUnregisterSample_Driver). Run it with no trace session enabling the provider
and every write costs one attribute test and goes nowhere; start one first and they land in it:

    openetw session start Drv -p b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6 -o drv.etl
    python sample_driver.py
    openetw session stop Drv && openetw report --manifest evntdrv.xml drv.etl
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
STATUS_SUCCESS = 0
DEVICE_NAME = "\\Device\\EventDrv"


class DeviceObject:
    """Stands in for the DEVICE_OBJECT that IoCreateDevice returns."""

    def __init__(self, name: str) -> None:
        self.name = name


def load_events(directory: Path) -> ModuleType:
    """The module ``openetw mc`` generated from evntdrv.xml (``sample_driver.py`` in ``directory``)."""
    if not (directory / "sample_driver.py").is_file():
        sys.exit(f"no generated module in {directory}: run `openetw mc {HERE / 'evntdrv.xml'} -o {directory}`")
    sys.path.insert(0, str(directory))  # ahead of this script's own directory: same module name
    import sample_driver as events

    return events


def driver_entry(events: ModuleType) -> DeviceObject:
    device = DeviceObject(DEVICE_NAME)
    events.register()  # EventRegisterSample_Driver()
    name_length = len(device.name.encode("utf-16-le"))  # UNICODE_STRING.Length: bytes, no NUL
    written = events.provider.write_start_event(name_length, device.name, STATUS_SUCCESS)
    report("DriverEntry", f"created {device.name}, registered the provider", "StartEvent", written)
    return device


def dispatch_device_control(events: ModuleType, number: int) -> None:
    written = events.provider.write_sample_event_a()  # EventWriteSampleEventA(NULL)
    report(f"request {number}", "IRP_MJ_DEVICE_CONTROL handled", "SampleEventA", written)


def driver_unload(events: ModuleType, device: DeviceObject) -> None:
    written = events.provider.write_unload_event(id(device))  # the device object's address
    events.unregister()  # EventUnregisterSample_Driver()
    report("DriverUnload", f"deleted {device.name}, unregistered the provider", "UnloadEvent", written)


def report(where: str, what: str, event: str, written: bool) -> None:
    fate = "written" if written else "not written: no session enables it"
    print(f"sample driver | {where:<13} {what:<48} {event}: {fate}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The Sample Driver: registers, writes its events, unregisters.")
    parser.add_argument("--requests", type=int, default=3, help="simulated requests, one SampleEventA each (default 3)")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between requests (default 0.2)")
    parser.add_argument("--generated", type=Path, default=HERE / "generated", help="where the generated module is")
    args = parser.parse_args(argv)
    events = load_events(args.generated.resolve())
    device = driver_entry(events)
    try:
        for number in range(1, args.requests + 1):
            time.sleep(args.interval)
            dispatch_device_control(events, number)
    finally:
        driver_unload(events, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
