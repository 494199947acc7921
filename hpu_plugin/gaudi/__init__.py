"""Facts about Gaudi hardware and its software stack, mostly as pure functions.

Nothing here imports torch, a host library or a plugin: the plugins and the emulator both
ask these rules, so what the emulator allows is what Gaudi allows. Nothing here runs a
program, writes, or keeps state: the rules read only what they are given (and
``software.real_gaudi_installed`` asks the import system whether ``habana_frameworks`` can be
found). Running ``hl-smi`` and the job check that needs its answer are
``hpu_plugin.machine``; what the plugin changes is recorded in ``hpu_plugin.patching``.

- ``visibility``   ``HABANA_VISIBLE_MODULES`` / ``HABANA_VISIBLE_DEVICES`` / ``HLS_MODULE_ID``
- ``hlsmi``        ``hl-smi -Q ... -f csv``: parser, formatter (for the emulator)
- ``selection``    a job's devices: group sizes and module-id combinations, one process per
                   device, the module each local rank takes. Entry point for hosts:
                   ``check_distributed_job(environ, world_size, local_world_size, local_rank,
                   host_modules) -> JobPlacement`` (``machine.check_this_process(environ)`` adds
                   this host's ``hl-smi`` map)
- ``generations``  GAUDI / GAUDI2 / GAUDI3 and what each supports (dtypes, int64, bitsandbytes)
- ``modes``        lazy and eager, and what each allows (``torch.compile`` needs eager)
- ``environment``  the defaults the plugin applies where the user set nothing
- ``tuning``       the settings of the fast paths, shape buckets and fp8 switch, parsed in
                   one place,
                   and ``faults(environ)``: the bad ones, which activation refuses up front
- ``errors``       ``GaudiConfigError``: a ``Refusal`` (so hooks may raise it) and a
                   ``ValueError``, naming the variable, its value, what is supported, the fix
"""
