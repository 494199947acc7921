"""Run unchanged Hugging Face code on Intel Gaudi (torch device ``hpu``).

Nothing here needs importing by users: ``hpu_plugin.activation.autoload`` runs inside
``import torch`` through the ``torch.backends`` entry point. Keep this module empty of
imports: it is on the import path of every ``import torch`` on the machine.
"""

__version__ = "0.1.0"
