"""The read model: what every application needs from a trace (its state over time, stacks, ...).

Modules are imported by name (``openetw.events.trace_state``, ``openetw.events.stacks``); this
package exports nothing itself, so importing one module loads that module only.
"""

__all__: list[str] = []
