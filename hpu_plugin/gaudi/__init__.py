"""Facts about Gaudi hardware and its software stack, as pure functions.

Nothing here imports torch, a host library or a plugin: the plugins and the emulator both
ask these rules, so what the emulator allows is what Gaudi allows.
"""
