"""A user trace with one provider and one filter (krabsetw's first user trace example).

The PowerShell provider, keywords as krabsetw's example asks for them, and a filter on event
7937 (a command runs) whose callback reads the ``ContextInfo`` property. krabsetw runs this on
a live session; here the session was recorded to ``powershell.etl`` (krabsetw's own sample).

    .venv/bin/python examples/consumer/user_trace_with_filter.py
"""

from __future__ import annotations

from _corpus import corpus_file

from openetw.consumer import EventFilter, Provider, UserTrace
from openetw.consumer import predicates as P


def main() -> None:
    etl = corpus_file("etl", "krabsetw", "powershell.etl")
    manifest = corpus_file("manifests", "Win10-17134", "Microsoft-Windows-PowerShell.xml")

    trace = UserTrace(files=[etl], manifests=[manifest])
    provider = Provider("Microsoft-Windows-PowerShell")
    provider.any(0xF0010000000003FF)

    commands = EventFilter(P.id_is(7937))

    def on_command(record, context) -> None:
        parser = context.parser_for(record)
        context_info = parser.try_parse("ContextInfo", "")
        fields = {name.strip(): value.strip() for name, _, value in (line.partition("=") for line in context_info.splitlines())}
        command = fields.get("Command Name") or fields.get("Command Type", "?")
        print(f"{record.time:%H:%M:%S} pid={record.pid} {command:<12} {parser.try_parse('Payload', '').strip()}")

    commands.add_on_event_callback(on_command)
    provider.add_filter(commands)
    trace.enable(provider)
    trace.start()

    stats = trace.query_stats()
    print(f"{stats['events_read']} events read, {stats['events_handled']} from PowerShell, {stats['events_unmatched']} from elsewhere")


if __name__ == "__main__":
    main()
