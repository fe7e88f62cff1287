"""Reading properties: by name with ``parse``/``try_parse``, and every property in order.

Process starts and stops from the Microsoft-Windows-Kernel-Process provider, decoded through
its manifest; the first event of each kind is shown whole.

    .venv/bin/python examples/consumer/parsing_properties.py
"""

from __future__ import annotations

from datetime import datetime

from _corpus import corpus_file

from openetw.consumer import EventFilter, Provider, UserTrace


def main() -> None:
    etl = corpus_file("etl", "tx", "Process.etl")
    manifest = corpus_file("manifests", "Win10-17134", "Microsoft-Windows-Kernel-Process.xml")
    trace = UserTrace(files=[etl], manifests=[manifest])
    provider = Provider("Microsoft-Windows-Kernel-Process")
    shown: set[int] = set()

    def on_process(record, context) -> None:
        schema = context.schema_for(record)
        parser = context.parser_for(record)
        pid = parser.parse("ProcessID", int)
        image = parser.try_parse("ImageName", "?", str)
        created = parser.parse("CreateTime", datetime)
        print(f"{schema.task_name:<12} {pid:>6} {image}  (created {created:%Y-%m-%d %H:%M:%S})")
        if record.id not in shown:
            shown.add(record.id)
            for prop in parser.properties():
                print(f"    {prop.name:<24} {prop.value!r}")

    starts_and_stops = EventFilter([1, 2])
    starts_and_stops.add_on_event_callback(on_process)
    provider.add_filter(starts_and_stops)
    trace.enable(provider)
    trace.start()


if __name__ == "__main__":
    main()
