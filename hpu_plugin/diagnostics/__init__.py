"""What the plugin sees on this machine, and whether a Gaudi job set up like this will work.

Everything ``hpu-plugin`` reports is collected here as plain data (dicts and
:class:`~hpu_plugin.gaudi.findings.Finding` lists); ``hpu_plugin.cli`` only parses arguments
and prints. The arrows run one way: cli and activation -> diagnostics -> hosts, registry, gaudi, the
process status (``hpu_plugin.state``); nothing below imports this folder. The hosts' ``env``
commands show :mod:`.summary` because activation hands it to ``hosts.install``.

- ``inventory`` what is installed, whether there is a Gaudi to look at, the mode, torch.hpu
- ``info``     versions, activation, plugins, hooks in call order, the decisions now
- ``devices``  devices from hl-smi (or torch.hpu), visibility, whether the group is valid
- ``plugins``  installed plugins, their status and the call order
- ``checks``   ``doctor``: one function per rule, each returning findings
- ``releases`` where the installed hosts stand against the tested releases; which adapters
               stayed out (``info`` and ``doctor``)
- ``summary``  the Gaudi section of ``accelerate env`` / ``transformers env``
"""
