"""The CLI's one error policy: one line, no control characters from user data, the flag named."""

from __future__ import annotations

import importlib
import subprocess
import sys

from fabricscope.cli import COMMAND_MODULES, COMMANDS, Parser
from helpers import cli_env, run_cli


def _line(done):
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    return line


def test_escape_codes_from_a_file_or_a_flag_never_reach_the_terminal(tmp_path):
    cluster = tmp_path / "evil.toml"
    cluster.write_text(
        'description = "evil\\u001b[31mred"\nnodes = 1\ngpus_per_node = 8\ngpu = "rtx-4090"\nintra = "pcie"\n'
        '[network]\nnic = "eth-100g"\nnics_per_node = 1\ntransport = "rdma"\n'
    )
    line = _line(run_cli(["predict", "--cluster", str(cluster)]))
    assert "must be a string without control characters" in line and "\x1b" not in line
    line = _line(run_cli(["bench", "-d", "fl\x1b[2Joat\nnext"]))
    assert "\x1b" not in line and "\\x1b[2J" in line and "\\n" in line


def test_library_errors_are_reworded_with_the_flag_that_set_the_value():
    assert _line(run_cli(["plan", "--model", "llama-7b", "--gpus", "12"])).startswith(
        "error: --gpus must be a multiple of 8"
    )
    line = _line(run_cli(["estimate", "--model", "llama-7b", "--cluster", "dgx-a100-hdr", "--precision", "fp8"]))
    assert line.startswith("error: --precision fp8: a100-sxm-80gb has no fp8 tensor cores")


def test_each_command_is_registered_by_the_module_its_entry_names():
    registered = {}
    for module in COMMAND_MODULES:
        parser = Parser(prog="fabricscope")
        subparsers = parser.add_subparsers(dest="command", parser_class=Parser)
        importlib.import_module(module).add_parser(subparsers)
        registered.update(dict.fromkeys(subparsers.choices, module))
    assert registered == COMMANDS


def test_a_command_line_that_names_a_command_imports_no_other_command_module():
    code = (
        "import sys, fabricscope.cli as c; p = c.build_parser(sys.argv[1:]); "
        f"print(' '.join(m for m in {list(COMMAND_MODULES)!r} if m in sys.modules)); "
        "p.parse_known_args(sys.argv[1:])"
    )
    for argv, loaded in (
        (["doctor", "--list"], ["fabricscope.doctor.cli"]),
        (["validate", "--help"], ["fabricscope.model.cli"]),
        (["--help"], list(COMMAND_MODULES)),
        (["doctr"], list(COMMAND_MODULES)),  # an unknown command: the error lists every command
    ):
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=cli_env())
        assert done.stdout.splitlines()[0].split() == loaded, argv
    assert "invalid choice: 'doctr'" in run_cli(["doctr"]).stderr


def test_a_mistyped_command_or_choice_is_answered_with_the_nearest_one_on_one_line():
    for argv, near, help_of in (
        (["doctr"], "'doctor'", "fabricscope"),
        (["bnech"], "'bench'", "fabricscope"),
        (["import", "nccltests", "x.log"], "'nccl-tests'", "fabricscope import"),
    ):
        done = run_cli(argv)
        assert done.returncode == 2 and done.stdout == "", argv
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert f"invalid choice: '{argv[-1] if argv[0] != 'import' else argv[1]}' (did you mean {near}?)" in done.stderr
        assert done.stderr.endswith(f"(see '{help_of} --help')\n")
    far = run_cli(["xyzzy"]).stderr
    assert "invalid choice: 'xyzzy' (choose from 'bench'," in far and "did you mean" not in far
    long = run_cli(["a" * 5000]).stderr
    assert long.count("\n") == 1 and len(long) < 400 and "..." in long


def test_a_negative_value_reaches_its_options_own_check():
    """argparse took "-5%" for a flag and said only "expected one argument"; the value's fault is named."""
    for argv, said in (
        (["compare", "a.json", "--against", "b.json", "--tolerance", "-5%"], "--tolerance must be a share from 0%"),
        (["history", "--since", "-5d"], "nor an age"),
        (["bench", "-b", "-8K"], "invalid size '-8K'"),
    ):
        done = run_cli(argv)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, (argv, done.stderr)
        assert said in done.stderr and "expected one argument" not in done.stderr, (argv, done.stderr)
