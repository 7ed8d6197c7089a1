"""The ``drakit`` command line: one module per command group."""
