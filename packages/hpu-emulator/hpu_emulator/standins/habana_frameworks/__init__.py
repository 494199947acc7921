"""Stand-in for the Gaudi software's ``habana_frameworks`` package (hpu_plugin emulator)."""

#: Lets tools tell the stand-in from the real package.
EMULATED = True
