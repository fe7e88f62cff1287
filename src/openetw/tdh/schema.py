"""The event schema model, under the decoding layer's name: its home is ``openetw.etl.schema``.

Decoders build and read ``Schema`` objects; encoders (providers, the test kit) write by them too,
so the classes live with the ETL format and are the same objects here.
"""

from openetw.etl.schema import REST, EventMap, MapEntry, MapKind, PropertyInfo, Schema, SchemaSource

__all__ = ["REST", "EventMap", "MapEntry", "MapKind", "PropertyInfo", "Schema", "SchemaSource"]
