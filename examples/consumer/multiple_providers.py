"""Several providers on one trace, over several files merged in time order.

A diagnostics session recorded a user file, a kernel file and an injected file; the trace
merges them as ``openetw relog`` would. Kernel events are matched by their event class GUID
(Process, Image), user events by provider; the rest goes to the default callback.

    .venv/bin/python examples/consumer/multiple_providers.py
"""

from __future__ import annotations

from collections import Counter

from _corpus import corpus_file

from openetw.consumer import EventFilter, Provider, UserTrace
from openetw.consumer import predicates as P

KERNEL_PROCESS = "3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c"
KERNEL_IMAGE = "2cb15d1d-5fc1-11d2-abe1-00a0c911f518"
IMAGE_ID = "b3e675d7-2554-4f18-830b-2762732560de"  # KernelTraceControl's ImageID


def main() -> None:
    folder = ("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession")
    files = [corpus_file(*folder, name) for name in ("diaghub.etl", "diaghub.kernel.1.etl", "diaghub.user_injected.1.etl")]
    trace = UserTrace(files=files, manifests=[])

    processes = Provider(KERNEL_PROCESS)
    started: Counter[str] = Counter()

    def on_process(record, context) -> None:
        if record.opcode in (1, 3):  # Start, and DCStart (running when the trace began)
            name = context.parser_for(record).try_parse("ImageFileName", "?")
            if not started:
                print(f"first process event: {context.schema_for(record).event_name} {name} (pid {context.parser_for(record).try_parse('ProcessID')})")
            started[name] += 1

    processes.add_on_event_callback(on_process)
    images = Provider(KERNEL_IMAGE)
    loads: Counter[str] = Counter()
    images.add_on_event_callback(lambda record, context: loads.update([context.parser_for(record).try_parse("FileName", "?").rsplit("\\", 1)[-1]]))
    image_ids = Provider(IMAGE_ID)
    pdbs = EventFilter(P.opcode_is(36))  # DbgID_RSDS: where the symbols are
    pdbs.add_on_event_callback(lambda record, context: loads.update(["(pdb) " + context.parser_for(record).try_parse("PDBFileName", "?").rsplit("\\", 1)[-1]]))
    image_ids.add_filter(pdbs)
    others: Counter[str] = Counter()
    trace.set_default_event_callback(lambda record, context: others.update([context.schema_for(record).provider_name or str(record.provider_id)]))

    for provider in (processes, images, image_ids):
        trace.enable(provider)
    trace.start()

    print("processes started or running:", ", ".join(f"{name} x{count}" for name, count in started.most_common(5)))
    print("most loaded images:", ", ".join(f"{name} x{count}" for name, count in loads.most_common(5)))
    print("other providers:", dict(others))
    stats = trace.query_stats()
    print(f"{stats['events_read']} events from {len(files)} files, {stats['events_handled']} handled")


if __name__ == "__main__":
    main()
