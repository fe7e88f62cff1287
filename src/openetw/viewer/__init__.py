"""``openetw viewer``: a local web Event Viewer over ``.etl`` and ``.evtx`` files and live sessions.

``model`` answers the page's questions on columns (pure); ``sources`` gives each kind of source
its columns and events; ``export`` writes a filtered set; ``app`` is the web application behind
the run's token; ``server`` serves it. The page (``static/``) is plain JavaScript and CSS.
"""
