"""The read model: what every application needs from a trace, between the engine and them.

One schema-registry builder (``registry``), the decoded event and its text (``decoded``,
``text``, ``as_csv``, ``as_xml``, ``as_json``), one way to open any source as records under one
damage policy (``sources``), one Event Log XPath with back ends for SQL, columns and records
(``xpath``), the trace's state over time (``trace_state``), stacks (``stacks``, ``frames``,
``profile``). It imports the engine, never an application or ``cli``.

Modules are imported by name (``openetw.events.decoded``, ``openetw.events.trace_state``); this
package exports nothing itself, so importing one module loads that module only.
"""

__all__: list[str] = []
