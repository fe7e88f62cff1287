"""The consumer's engine, apart from its krabsetw-shaped API (private: names here may change).

- ``blocks``: the index file, columns in fixed-size compressed blocks with a summary each.
- ``streaming``: the first pass, rows in time order a bounded piece at a time, written as blocks
  and handed out as they are made.
- ``segments``: a block's rows as the plan and the loader see them, and the time-ordered merge
  of several files' blocks in bounded windows.
- ``location``: where an index lives and whether a stored one may be trusted; the cache's cap.
"""
