"""The Gaudi bridge's own tests on the emulator, unchanged, summarised by area and cause.

``python -m peer_suites bridge --checkout PATH [--mode eager|lazy|compile] [--dut gaudi2]
[--markdown FILE] [TEST ...]`` runs the tests of a checkout of HabanaAI/gaudi-pytorch-bridge
(``tests/pytest_working``, or the paths given inside it) with the bridge's own ``conftest.py``,
its ``--mode`` and ``--dut`` options and its skip list, on the emulated Gaudi of that
generation, one pytest run. The tests need a Gaudi, so there is no CPU run to compare with:
each outcome is counted by area (the folder under ``tests/pytest_working``: ``any_mode``,
``eager``, ``lazy``, ``compile``, ...) and each failure by its cause (the exception and its
first line, digits folded, so one missing op is one cause however many cases hit it). A test
file that cannot be collected counts as one error of its area. CI cannot fetch a repository:
this is a one-off local run, recorded in peer_suites/RESULTS.md.

This module is also the run's pytest plugin (``-p peer_suites.bridge``): it records each file
that fails to collect.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from peer_suites.sources import REPO, PeerSetupError, cache_root

TESTS = Path("tests") / "pytest_working"
MODES = ("eager", "lazy", "compile")
DUTS = ("gaudi", "gaudi2", "gaudi3")
#: Seconds one bridge test may take (its own CI gives its slowest cases minutes).
TEST_TIMEOUT = 300
#: Address space the run may use: the emulated device memory is the host's, and some of the
#: bridge's cases allocate tens of GB (a real Gaudi has 96-128 GB); past this limit such a
#: case fails with an out-of-memory error instead of the kernel ending the whole run.
MEMORY_LIMIT = 12 * 1024**3

#: Failures outside what the emulator claims (packages/hpu-emulator/README.md): a pattern
#: searched in ``"<node id>: <cause>"`` and the reason. Such a case ran, but is not a case of
#: the claimed surface: a name the emulator does not offer (the failure names it), bridge
#: machinery its README says it does not model, what the test environment lacks, a rule of
#: the plugin (reported, not the emulator's), or a fact only a real device has.
OUTSIDE_CLAIM: tuple[tuple[str, str], ...] = (
    # names the emulator does not offer (packages/hpu-emulator/README.md says which); the
    # failure names them
    (r"collection: .*cannot import name '(fpN_fused_sdpa|PySDPA|FusedLamb|FusedLars|"
     r"FusedAdagrad)'",
     "not offered: an hpex name the emulator does not have (fp8 fused SDPA, PySDPA, "
     "FusedLamb, FusedLars, FusedAdagrad)"),
    (r"collection: .*No module named 'habana_frameworks\.torch\.(hpex\.optimizers\.distributed"
     r"|hpex\.experimental\.transformer_engine\.cpp_extensions|hpex\.kernels\.fbgemm"
     r"|utils\.experimental\.detect_recompilation|core\.torch_overwrites|core\.quantizer"
     r"|dynamo\.compile_backend\.(_passes|random_utils|partition_fn))'",
     "not offered: a bridge module the emulator does not have (distributed FusedAdamW, the "
     "Transformer Engine's C++ casts, fbgemm, the compile backend's passes and partitioner, "
     "pt2e quantizer, recompilation detector, torch overwrites)"),
    (r"'_OpNamespace' 'hpu' object has no attribute|save_fpN_meta|set_measurement_mode"
     r"|low_overhead_profiler|has no attribute 'enable_const_section_serialization'"
     r"|compile_backend' has no attribute '(compilers|recipe_compiler)'"
     r"|internal' has no attribute 'lazy_only'|hpu' has no attribute '_utils'",
     "not offered: an op, Transformer Engine call or bridge internal the emulator does not "
     "have, named in the failure"),
    # what the test environment lacks
    (r"No module named 'torchvision'",
     "test environment: torchvision is not installed (its ops' HPU kernels are not claimed)"),
    (r"np\.alltrue",
     "test environment: NumPy 2 removed np.alltrue (the bridge's requirements pin NumPy 1.26)"),
    (r"quantize_ptNe'|compiled_autograd' has no attribute 'enable'",
     "test environment: torch 2.13 moved the API the test calls (the bridge follows torch 2.5)"),
    (r"test_hpu_views\.py::test_hpu_non_contiguous_outputs\[fn6\]",
     "test environment: Tensor.view((3, 2), (1, 3)) needs the bridge's torch fork (stock torch "
     "refuses that form on the CPU too)"),
    (r"test_sag_upsample_\w+_backward_node_params",
     "test environment: sizes given as tensors need the bridge's torch fork (stock torch "
     "refuses them on the CPU too)"),
    (r"test_hpu_add_sub_rsub\.py::.*: assert False",
     "test environment: torch 2.13's AOT autograd drops a symbolic float alpha (aot_eager on "
     "the CPU gives the same wrong sum)"),
    (r"test_hpu_ctx_manager\.py::.*Scalars are not equal",
     "test environment: the count of graph nodes for streams and events is torch's: torch 2.13 "
     "records each stream and event call as a node (for the same functions on CUDA its own "
     "test_ctx_manager.py counts 9 and 15, as here; the bridge's counts follow torch 2.5)"),
    (r"test_hpu_rng_state\.py::test_fork_rng",
     "test environment: fork_rng forks every visible device's RNG, which the bridge keeps for "
     "device 0 only; the test needs a machine with one visible Gaudi"),
    # the plugin (reported, not the emulator's to change)
    (r"CompileModeError",
     "plugin: refuses torch.compile when called in lazy mode, which the bridge allows at "
     "decoration (the file decorates a function with it at import)"),
    # facts only a real device has
    (r"DefaultCPUAllocator: can't allocate memory",
     "device fact: tensors of tens of GB (a Gaudi 2 has 96 GB; the run has 12 GiB)"),
    (r"HOST_BARRIER",
     "device fact: the HCCL process group's own store protocol at teardown"),
    (r"test_saving_multinode_graphs|test_const_serialization_cache",
     "device fact: graph dumps and constant sections of the Synapse graph compiler"),
    (r"test_eager_ops\.py::test_(efficientzerotensor|sag_\w+)_node_params|test_eager_ops\.py"
     r"::\w+: assert N == N",
     "not modelled: the bridge's eager JIT recipe cache (a compiled recipe per op and "
     "shape; README: eager ops compile nothing here)"),
    (r"were not found in the JIT IR|is not found in generated JIT IR|aten\.randint\.low' in"
     r"|aten\.linear' in|torch\.as_strided'|Compilation stat dumps not present"
     r"|partitions are merged|reuse a N MB bwd input"
     r"|test_fuse_collectives\.py::test_collective_block_fuse",
     "not modelled: the bridge's compile passes, decompositions and recipe statistics "
     "(README: hpu_backend is aot_eager)"),
)


def _environment(outcomes: Path, dut: str, mode: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("HPU_PLUGIN_", "PT_HPU_", "HABANA_"))}
    env.update(HPU_PLUGIN_EMULATE=dut, HPU_PLUGIN_PEER_OUTCOMES=str(outcomes),
               HPU_PLUGIN_PEER_PARENT=str(os.getpid()), HF_HUB_OFFLINE="1")
    # The bridge's conftest sets the mode in pytest_configure, but lazy/conftest.py imports
    # torch before that hook runs (pytest loads the conftests of the given paths first);
    # the bridge then starts in its own default, lazy, which is what --mode=lazy asks. The
    # mode is set from the start, so the emulated stack starts in the mode the run asks for.
    env["PT_HPU_LAZY_MODE"] = "1" if mode == "lazy" else "0"
    # A Gaudi machine's environment names its log directory (Intel's containers set it);
    # the bridge's test helpers read it (test_utils.get_fuser_debug_logs_path).
    habana_logs = outcomes.parent / "habana_logs"
    habana_logs.mkdir(exist_ok=True)
    env["HABANA_LOGS"] = str(habana_logs)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def run(checkout: Path, mode: str, dut: str, paths: list[str], timeout: float
        ) -> dict[str, dict[str, str]]:
    """One pytest run of the bridge's tests; the outcome of each node id."""
    tests = checkout.expanduser().resolve() / TESTS
    if not (tests / "conftest.py").is_file():
        raise PeerSetupError(f"--checkout {checkout}: no {TESTS}/conftest.py; give a checkout "
                             "of HabanaAI/gaudi-pytorch-bridge")
    logs = cache_root() / "runs"
    logs.mkdir(parents=True, exist_ok=True)
    outcomes, log = logs / f"bridge-{mode}-{dut}.json", logs / f"bridge-{mode}-{dut}.log"
    outcomes.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-p", "peer_suites.outcomes",
               "-p", "peer_suites.bridge", "-p", "no:cacheprovider", "-q", "-rN", "-o", "addopts=",
               f"--timeout={TEST_TIMEOUT}", "--continue-on-collection-errors", "--tb=line",
               f"--mode={mode}", f"--dut={dut}", *(paths or ["."])]
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as handle:
        try:
            subprocess.run(command, cwd=tests, env=_environment(outcomes, dut, mode), stdout=handle,
                           stderr=subprocess.STDOUT, timeout=timeout, check=False,
                           preexec_fn=_limit_memory)
        except subprocess.TimeoutExpired:
            print(f"peer_suites: the bridge's tests exceeded {timeout:.0f} s; log: {log}")
    print(f"peer_suites: bridge ({mode}, {dut}): {time.monotonic() - started:.0f} s, log {log}")
    if not outcomes.exists():
        raise PeerSetupError(f"the bridge's tests ended without results; see {log}")
    return json.loads(outcomes.read_text(encoding="utf-8"))


def load(path: Path) -> dict[str, dict[str, str]]:
    """The outcomes a run saved (``bridge-<mode>-<dut>.json`` beside its log)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PeerSetupError(f"--outcomes {path}: {error}") from error


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def area(nodeid: str) -> str:
    """The folder under ``tests/pytest_working`` a test is in (``top level`` for its files);
    node ids may be relative to the checkout's root or to that folder."""
    path = nodeid.split("::", 1)[0]
    prefix = TESTS.as_posix() + "/"
    if path.startswith(prefix):
        path = path[len(prefix):]
    parts = path.split("/")
    return parts[0] if len(parts) > 1 else "top level"


def pytest_collectreport(report: Any) -> None:
    """A test file that cannot be collected (an import the emulator does not offer) is one
    error of its area, with the exception's last line as its cause."""
    if report.failed and report.nodeid.endswith(".py"):
        from peer_suites import outcomes

        text = str(report.longrepr).strip().splitlines() if report.longrepr else []
        message = next((line[2:] for line in reversed(text) if line.startswith("E   ")),
                       text[-1] if text else "")
        outcomes.record(report.nodeid, "error", f"collection: {message[:300]}")


def cause(message: str) -> str:
    """A failure's cause: its first line with numbers folded."""
    first = message.strip().splitlines()[0] if message.strip() else "(no message)"
    first = re.sub(r"0x[0-9a-f]+", "0x…", first)
    first = re.sub(r"\d+", "N", first)
    return first[:160]


def outside_claim(nodeid: str, message: str) -> str | None:
    """Why a failure is outside what the emulator claims (:data:`OUTSIDE_CLAIM`), if it is."""
    text = f"{nodeid}: {cause(message)}"
    for pattern, reason in OUTSIDE_CLAIM:
        if re.search(pattern, text):
            return reason
    return None


def summary(outcomes: dict[str, dict[str, str]]) -> tuple[dict[str, collections.Counter[str]],
                                                           collections.Counter[str]]:
    """Outcomes counted by area (a failure outside the claim is counted ``outside`` too), and
    failures (failed, error) counted by cause."""
    areas: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    causes: collections.Counter[str] = collections.Counter()
    for nodeid, entry in outcomes.items():
        areas[area(nodeid)][entry["outcome"]] += 1
        if entry["outcome"] in ("failed", "error"):
            message = entry.get("message", "")
            causes[cause(message)] += 1
            if outside_claim(nodeid, message) is not None:
                areas[area(nodeid)]["outside"] += 1
    return dict(areas), causes


def outside_reasons(outcomes: dict[str, dict[str, str]]) -> collections.Counter[str]:
    """The failures outside the claim, counted by reason."""
    return collections.Counter(
        reason for nodeid, entry in outcomes.items()
        if entry["outcome"] in ("failed", "error")
        and (reason := outside_claim(nodeid, entry.get("message", ""))) is not None)


def markdown(outcomes: dict[str, dict[str, str]], mode: str, dut: str, top: int = 25) -> str:
    """The RESULTS.md text of one run: a row an area, then the commonest causes."""
    areas, causes = summary(outcomes)
    lines = [f"### The bridge's tests, `--mode={mode} --dut={dut}`", "",
             "| area | cases | passed | failed | error | skipped | passed of those run "
             "| outside the claim | passed on the claimed surface |",
             "|---|---|---|---|---|---|---|---|---|"]
    total: collections.Counter[str] = collections.Counter()
    for name in sorted(areas):
        counts = areas[name]
        total.update(counts)
        lines.append(_row(name, counts))
    lines.append(_row("**total**", total))
    reasons = outside_reasons(outcomes)
    if reasons:
        lines += ["", "Failures outside what the emulator claims, by reason:", ""]
        lines += [f"- {count}: {reason}" for reason, count in reasons.most_common()]
    if causes:
        lines += ["", f"The {min(top, len(causes))} commonest causes of the failures:", ""]
        lines += [f"- {count}: `{text}`" for text, count in causes.most_common(top)]
    else:
        lines += ["", "No failures."]
    return "\n".join(lines) + "\n"


def _row(name: str, counts: collections.Counter[str]) -> str:
    ran = counts["passed"] + counts["failed"] + counts["error"]
    share = f"{100 * counts['passed'] / ran:.1f}%" if ran else "-"
    claimed = ran - counts["outside"]
    claimed_share = f"{100 * counts['passed'] / claimed:.1f}%" if claimed else "-"
    cases = sum(n for key, n in counts.items() if key != "outside")
    return (f"| {name} | {cases} | {counts['passed']} | {counts['failed']} "
            f"| {counts['error']} | {counts['skipped']} | {share} | {counts['outside']} "
            f"| {claimed_share} |")
