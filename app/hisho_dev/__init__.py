"""Developer tools that are not part of the shipped app: the hub-shaped HTTP server the tests and
``hisho bench hub`` run on 127.0.0.1 (``hub_server``, ``hub_http``) and the screenshot tool of
``make screenshots`` (``screenshots``, ``models_shots``).

Rules of use: importable from a source checkout only. The wheel leaves this package out
(``[tool.setuptools.packages.find]``) and so does the PyInstaller bundle (``packaging/collect.py:EXCLUDES``); nothing in
``hisho`` imports it except ``hisho bench hub``, which says it needs a checkout when it is missing.
"""
