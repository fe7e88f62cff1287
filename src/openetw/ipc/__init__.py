"""The boundary between processes: what producers, controllers and the trace service share.

* ``pool`` — the shared-memory buffer pool: its layout (a pool header, state words, ETL buffers),
  the producer's write path and the service's take/release side;
* ``protocol`` — the control protocol: frames, the one-byte FULL notice, descriptors passed with
  messages, ``Channel``;
* ``wire`` — session settings, enable rules and enable states as JSON, checked on the way in;
* ``stream_options`` — where and as whom a session streams: the ``"stream"`` settings a start
  request carries;
* ``paths`` — where the control socket lives and who is on the other end of a connection.
  ``places`` says where as text, so a producer finds the service without ``pathlib``.

Providers, controllers, generated code and the service all import this package; it imports none
of them (only the pure layers ``etl`` and ``session``), so a program that writes events never
loads the service. Import the modules themselves: this package imports nothing at load.
"""
