"""``python -m hpu_plugin``: the ``hpu-plugin`` command."""

from hpu_plugin.cli import main

raise SystemExit(main())
