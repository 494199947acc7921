"""Stand-in for ``habana_frameworks.autoload``: the emulator loads through hpu_plugin's
``torch.backends`` entry point instead, so this only carries the ``is_loaded`` flag."""

is_loaded = False
