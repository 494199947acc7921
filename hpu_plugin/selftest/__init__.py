"""``hpu-plugin selftest``: end-to-end checks of this machine's Gaudi (or the emulator), each
in its own process with a time limit, with a table, JSON and a bug report as output.

``command``    the subcommand: options, orchestration, exit status
``catalog``    the checks, their time limits and module needs
``placement``  which Gaudi modules the checks may acquire
``runner``     one check's process group, its time limit and verdict
``protocol``   the verdict line a check prints
``harness``    what a check's process shares (device acquisition, verdicts)
``faults``     ``HPU_PLUGIN_SELFTEST_FAULT``, test-only fault injection
``probe``      the environment probe run before the checks
``report``     the report document, its scrubbing, and the table
``pair``       two-process jobs for the distributed checks
``tiny``       the tiny model every check builds from a config
``checks/``    one module per check

See docs/selftest.md.
"""
