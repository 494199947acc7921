"""``hpu-plugin`` run as users run it: in a subprocess, with no Gaudi at all, and with an
``hl-smi`` on PATH printing what the real tool prints."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from processes import no_hlsmi_path, run_cli, scrubbed

# "Multiple Dockers" page sample: 6 devices, unsorted, comma-space.
DOCKER_SAMPLE = "index, module_id\n3, 6\n1, 4\n2, 7\n0, 5\n4, 2\n6, 0\n"


def clean_env(path_dirs: list[Path] = (), **extra: str) -> dict[str, str]:
    """No Gaudi setting, and a PATH where only ``path_dirs`` may hold an ``hl-smi``."""
    return scrubbed(PATH=no_hlsmi_path(path_dirs), **extra)


def run(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=env, timeout=timeout)


def fake_hlsmi(
    tmp_path: Path, rows: list[dict[str, str]] | None = None, text: str | None = None
) -> Path:
    """An ``hl-smi`` that answers ``-Q <fields> -f csv`` for the given devices, in the
    documented format, or prints ``text`` for ``-Q index,module_id``."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    tool = folder / "hl-smi"
    tool.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        rows, text = {rows!r}, {text!r}
        fields = sys.argv[sys.argv.index("-Q") + 1].split(",")
        if text is not None:
            if fields != ["index", "module_id"]:
                sys.exit("hl-smi: unsupported field")
            sys.stdout.write(text)
            sys.exit(0)
        if any(f not in rows[0] for f in fields):
            sys.exit("hl-smi: unknown field")
        print(", ".join(fields))
        for row in rows:
            print(", ".join(str(row[f]) for f in fields))
    """)
    )
    tool.chmod(0o755)
    return folder


def server(name: str = "HL-225") -> list[dict[str, str]]:
    return [
        {
            "index": i,
            "module_id": i,
            "name": name,
            "memory.total": "98304 MiB",
            "bus_id": f"0000:{16 + i:02x}:00.0",
        }
        for i in range(8)
    ]


# -- no Gaudi at all -------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["info", "devices", "plugins", "doctor"])
def test_no_gaudi_text(command):
    done = run(command, env=clean_env())
    assert done.returncode == 0, done.stderr
    if command != "plugins":
        assert "No Gaudi here" in done.stdout
    else:
        assert "device" in done.stdout and "enabled" in done.stdout


def test_no_gaudi_json():
    env = clean_env()
    info = json.loads(run("info", "--json", env=env).stdout)
    assert info["gaudi"] is False and info["available"] is False
    assert info["versions"]["gaudi_software"] is None
    assert info["versions"]["torch"].startswith("2.")
    assert info["hooks"]["hpu_ddp_backend"] == ["gpu_migration", "ddp"]
    devices = json.loads(run("devices", "--json", env=env).stdout)
    assert devices["devices"] == [] and "No Gaudi here" in devices["message"]
    plugins = json.loads(run("plugins", "--json", env=env).stdout)
    names = {p["name"]: p for p in plugins["plugins"]}
    assert {"device", "compile", "ddp", "quantization"} <= set(names)
    assert all(
        names[n]["status"] == "enabled" and names[n]["first_party"] for n in ("device", "ddp")
    )
    doctor = json.loads(run("doctor", "--json", env=env).stdout)
    assert doctor["ok"] is True


def test_help_and_no_gaudi_info_import_no_torch():
    script = textwrap.dedent("""\
        import sys, io, contextlib
        from hpu_plugin import cli
        try:
            cli.main(["--help"])
        except SystemExit as exit:
            assert exit.code == 0
        with contextlib.redirect_stdout(io.StringIO()):
            assert cli.main(["info"]) == 0
            assert cli.main(["plugins"]) == 0
        assert "torch" not in sys.modules, "torch imported with no Gaudi"
        from hpu_plugin.diagnostics.summary import gaudi_summary
        summary = gaudi_summary()
        assert summary["Gaudi software"] == "not installed", summary
        assert all(isinstance(v, str) for v in summary.values())
        print("fine")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.startswith("usage: hpu-plugin"), done.stderr
    assert done.stdout.strip().endswith("fine"), done.stderr


def test_disabled_plugin_is_listed_with_the_reason():
    plugins = json.loads(
        run("plugins", "--json", env=clean_env(HPU_PLUGIN_DISABLE="quantization")).stdout
    )
    (quant,) = [p for p in plugins["plugins"] if p["name"] == "quantization"]
    assert quant["status"] == "disabled" and "HPU_PLUGIN_DISABLE" in quant["reason"]
    assert plugins["call_order"]["hpu_quantization_device_map"] == []


def test_bad_switch_is_reported_not_raised():
    done = run("plugins", env=clean_env(HPU_PLUGIN_NO_THIRD_PARTY="maybe"))
    assert done.returncode == 0 and "HPU_PLUGIN_NO_THIRD_PARTY" in done.stdout


# -- with an hl-smi ----------------------------------------------------------------------------


def test_devices_from_the_documented_docker_sample(tmp_path):
    env = clean_env([fake_hlsmi(tmp_path, text=DOCKER_SAMPLE)], HABANA_VISIBLE_MODULES="5,4")
    result = json.loads(run("devices", "--json", env=env).stdout)
    assert [(d["index"], d["module_id"]) for d in result["devices"]] == [
        (0, 5),
        (1, 4),
        (2, 7),
        (3, 6),
        (4, 2),
        (6, 0),
    ]
    assert [d["module_id"] for d in result["devices"] if d["visible"]] == [5, 4]
    assert result["group"]["valid"] and result["group"]["modules"] == [5, 4]
    text = run("devices", env=env).stdout
    assert "valid" in text and "hl-smi" in text


def test_doctor_translates_indices_given_as_module_ids(tmp_path):
    env = clean_env([fake_hlsmi(tmp_path, text=DOCKER_SAMPLE)], HABANA_VISIBLE_MODULES="0,1")
    done = run("doctor", "--json", env=env)
    assert done.returncode == 1
    errors = [f for f in json.loads(done.stdout)["findings"] if f["severity"] == "error"]
    assert errors[0]["variable"] == "HABANA_VISIBLE_MODULES" and errors[0]["value"] == "0,1"
    assert "HABANA_VISIBLE_MODULES=5,4" in errors[0]["fix"]


def test_devices_on_a_full_server(tmp_path):
    env = clean_env([fake_hlsmi(tmp_path, rows=server("HL-325L"))])
    result = json.loads(run("devices", "--json", env=env).stdout)
    assert len(result["devices"]) == 8
    assert {d["generation"] for d in result["devices"]} == {"GAUDI3"}
    assert result["devices"][0]["memory_mib"] == 98304
    assert result["group"] == {
        "modules": list(range(8)),
        "layout": "server",
        "valid": True,
        "message": "whole server",
        "warnings": [],
    }


@pytest.mark.parametrize(
    ("extra", "args", "code", "expected"),
    [
        ({"HABANA_VISIBLE_MODULES": "0,1"}, (), 0, "supported group of 2"),
        ({"HABANA_VISIBLE_MODULES": "0,2"}, (), 1, "0,1 | 2,3 | 4,5 | 6,7"),
        ({"HABANA_VISIBLE_MODULES": "0,1,2"}, (), 1, "a group of 3 devices"),
        ({}, ("--processes", "3"), 1, "LOCAL_WORLD_SIZE=3"),
        ({"HABANA_VISIBLE_MODULES": "4,5,6,7"}, ("--processes", "4"), 0, "supported group of 4"),
        (
            {
                "WORLD_SIZE": "2",
                "LOCAL_WORLD_SIZE": "2",
                "LOCAL_RANK": "1",
                "HABANA_VISIBLE_MODULES": "1,3",
            },
            (),
            1,
            "not a supported group of 2",
        ),
        ({"PT_HPU_LAZY_MODE": "1"}, ("--compile",), 1, "torch.compile does not work"),
        ({"PT_HPU_LAZY_MODE": "1"}, (), 0, "torch.compile does not work"),
        ({"PT_HPU_LAZY_MODE": "false"}, (), 1, "every value but '0' as lazy"),
        ({"PT_ENABLE_INT64_SUPPORT": "0"}, (), 0, "cast to int32"),
        ({"HLS_MODULE_ID": "0,1"}, (), 1, "HLS_MODULE_ID='0,1'"),
        ({}, ("--bnb", "4", "--bnb-quant-type", "fp4"), 1, "bnb_4bit_quant_type='fp4'"),
        ({}, ("--dtype", "fp16"), 0, "fp16 on GAUDI2"),
    ],
)
def test_doctor_rules_on_a_full_server(tmp_path, extra, args, code, expected):
    env = clean_env([fake_hlsmi(tmp_path, rows=server())], **extra)
    done = run("doctor", *args, env=env)
    assert done.returncode == code, done.stdout + done.stderr
    assert expected in done.stdout
    result = json.loads(run("doctor", "--json", *args, env=env).stdout)
    assert result["ok"] is (code == 0)


def test_doctor_on_first_generation_gaudi(tmp_path):
    env = clean_env([fake_hlsmi(tmp_path, rows=server("HL-205"))])
    for args, expected in [
        (("--dtype", "fp16"), "fp16 is not available on first-generation Gaudi"),
        (("--bnb", "4"), "bitsandbytes does not run on first-generation Gaudi"),
    ]:
        done = run("doctor", *args, env=env)
        assert done.returncode == 1 and expected in done.stdout
    assert "GAUDI has no int64" in run("doctor", env=env).stdout


def test_hanging_hlsmi_does_not_hang_the_command(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "hl-smi"
    tool.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(600)\n")
    tool.chmod(0o755)
    from hpu_plugin import machine

    env = clean_env([folder], HPU_PLUGIN_HLSMI_TIMEOUT="1")
    done = run("devices", "--json", env=env, timeout=machine.TIMEOUT + 60)
    assert done.returncode == 0
    assert json.loads(done.stdout)["devices"] == []
    doctor = run("doctor", env=env, timeout=machine.TIMEOUT + 60)
    assert doctor.returncode == 0 and "did not answer in 1 s" in doctor.stdout
