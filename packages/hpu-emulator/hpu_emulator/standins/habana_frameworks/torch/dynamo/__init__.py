"""Stand-in for ``habana_frameworks.torch.dynamo``: the package the bridge's ``torch.compile``
support lives in. Code written for Gaudi imports ``.compile_backend`` to have
``hpu_backend`` registered, and reads or sets its ``config`` flags.
"""
