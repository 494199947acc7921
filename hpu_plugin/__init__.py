"""Run unchanged Hugging Face code on Intel Gaudi (torch device ``hpu``).

Nothing here needs importing by users: ``hpu_plugin.activation.autoload`` runs inside
``import torch`` through the ``torch.backends`` entry point. Keep this module empty of
imports: it is on the import path of every ``import torch`` on the machine.

It also holds the one piece of process status every layer reads, :data:`state`: what
activation did. Here, every reader (hosts, diagnostics, the self-test) finds it without
importing activation, which imports them; and ``import torch`` pays no extra module for it.
"""

__version__ = "0.1.0"

#: What activation did in this process, for ``hpu-plugin info``, the hosts' reports and the
#: tests: ``status`` off (not run yet) | skipped | active | failed, and a ``reason``;
#: ``emulator`` is "started" once the emulator runs. Written by ``activation`` only.
state: dict[str, str] = {"status": "off", "reason": "not run"}
