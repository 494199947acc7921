"""One module per check; each runs as ``python -m hpu_plugin.selftest.checks.<module>`` in a
process of its own (see ``hpu_plugin.selftest.catalog`` for their names and time limits)."""
