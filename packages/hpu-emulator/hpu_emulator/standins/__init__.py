"""Holds the ``habana_frameworks`` stand-ins; this directory joins sys.path only while the
emulator runs (see startup.start), so ``find_spec("habana_frameworks")`` finds them then."""
