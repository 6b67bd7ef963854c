"""The command transcripts in README.md and docs/*.md cannot drift from the code (issue 24).

Every ``$ fabricscope ...`` line of a ``console`` block still parses: its sub-command and flags exist.
The transcripts of the model's commands (``predict``, ``estimate``, ``plan``, ``validate``, ``hw``) are
deterministic: each line they show is run and found in the real output, in order.  A line ``...`` skips
lines; ``...`` inside a line skips text; a time the command measured itself (``in 0.07 s``) is not
compared.  Transcripts of measuring commands (bench, doctor, monitor, dataload...) show one machine's
numbers: their lines are examples, and only their command lines are checked.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import run_cli

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DETERMINISTIC = {"predict", "estimate", "plan", "validate", "hw"}
"""Sub-commands whose output depends only on the package's data and their arguments."""
_MEASURED_TIME = re.compile(r"in \d+(\.\d+)? s\b")


@dataclass(frozen=True)
class Transcript:
    where: str
    args: list[str]
    shown: list[str]


def _transcripts() -> list[Transcript]:
    found: list[Transcript] = []
    for path in DOCUMENTS:
        inside = False
        current: Transcript | None = None
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.startswith("```"):
                inside = line.strip() == "```console"
                current = None
                continue
            if not inside:
                continue
            if line.startswith("$ "):
                words = shlex.split(line[2:], comments=True)
                current = None
                if words and words[0] == "fabricscope":
                    current = Transcript(f"{path.name}:{number}", words[1:], [])
                    found.append(current)
            elif current is not None:
                current.shown.append(line)
    return found


TRANSCRIPTS = _transcripts()


def test_the_documents_hold_transcripts_of_every_kind() -> None:
    commands = {t.args[0] for t in TRANSCRIPTS}
    assert {"predict", "estimate", "plan", "validate", "bench", "doctor"} <= commands, commands
    assert sum(1 for t in TRANSCRIPTS if t.args[0] in DETERMINISTIC and t.shown) >= 4


@pytest.mark.parametrize("transcript", TRANSCRIPTS, ids=lambda t: t.where)
def test_every_command_line_still_parses(transcript: Transcript) -> None:
    from fabricscope.cli import build_parser

    try:
        build_parser().parse_args(transcript.args)
    except SystemExit as exc:
        pytest.fail(f"{transcript.where}: fabricscope {shlex.join(transcript.args)} no longer parses ({exc})")


def _matches(shown: str, actual: str) -> bool:
    pattern = ".*".join(re.escape(part.strip()) for part in _MEASURED_TIME.sub("\0", shown).split("..."))
    pattern = pattern.replace(re.escape("\0"), r"in \d+(\.\d+)? s")
    return re.search(pattern, actual) is not None


def check_shown(shown: list[str], actual: list[str]) -> str | None:
    """None when every shown line (but ``...``) is found in ``actual``, in order; else the first that is not."""
    position = 0
    for line in shown:
        if not line.strip() or line.strip() == "...":
            continue
        while position < len(actual) and not _matches(line, actual[position]):
            position += 1
        if position == len(actual):
            return line
        position += 1
    return None


@pytest.mark.parametrize(
    "transcript", [t for t in TRANSCRIPTS if t.args[0] in DETERMINISTIC and t.shown], ids=lambda t: t.where
)
def test_the_model_commands_print_what_the_documents_show(transcript: Transcript, tmp_path: Path) -> None:
    done = run_cli(transcript.args, timeout=300, cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    missing = check_shown(transcript.shown, done.stdout.splitlines())
    assert missing is None, f"{transcript.where} shows a line the command no longer prints:\n{missing}"


def test_the_comparison_skips_and_elides_and_still_fails_on_a_changed_line() -> None:
    actual = ["searched 72 networks in 0.11 s", "a", "step time   4.577 s", "b"]
    assert check_shown(["searched 72 networks in 0.07 s", "...", "step time   4.577 s"], actual) is None
    assert check_shown(["searched ... networks", "step time   4.577 s"], actual) is None
    assert check_shown(["step time   4.578 s"], actual) == "step time   4.578 s"
    assert check_shown(["step time   4.577 s", "searched 72 networks in 0.07 s"], actual) is not None  # order


def test_the_documented_exporter_port_is_outside_the_exporters_range() -> None:
    """Issue 24: the fleet port the docs give (--serve) is not in Prometheus' exporter range 9100-9999,
    where every port belongs to some exporter (9400 is dcgm-exporter's, which GPU nodes run)."""
    ports = {
        int(port)
        for path in DOCUMENTS
        for port in re.findall(r"--serve (?:[\w.]+:|\[[^\]]+\]:)?(\d+)", path.read_text(encoding="utf-8"))
    }
    assert ports and not [p for p in ports if 9100 <= p <= 9999], ports
