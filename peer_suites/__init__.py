"""The host libraries' own test suites, run on CPU and on the emulated ``hpu``, compared.

Not part of the installed package (``pyproject.toml`` packages ``hpu_plugin*`` only): this
is the project's test harness, run from a checkout with ``python -m peer_suites``. The test
sources are the pinned releases' source distributions, fetched with pip into a cache outside
the repository; none of their test code is copied here. See docs/peer-suites.md.
"""
