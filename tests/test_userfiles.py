"""The one reader of user files: every hostile file is one ConfigError line, never a hang or a crash."""

from __future__ import annotations

import json
import os
import threading

import pytest

from fabricscope.errors import ConfigError, ResultFormatError
from fabricscope.results import load
from fabricscope.userfiles import MAX_DEPTH, read_json, read_text, read_toml


def _fifo(tmp_path):
    path = tmp_path / "pipe.toml"
    os.mkfifo(path)
    return path


def _run_with_deadline(fn, seconds=10.0):
    """Run fn in a thread; fail (instead of hanging the suite) if it does not return."""
    outcome: dict[str, BaseException | object] = {}

    def target():
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # handed back to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the reader blocked"
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome.get("value")


def test_a_fifo_is_refused_without_blocking(tmp_path):
    path = _fifo(tmp_path)
    with pytest.raises(ConfigError, match=r"is a FIFO, not a regular"):
        _run_with_deadline(lambda: read_toml(path))


def test_a_link_to_dev_zero_is_refused(tmp_path):
    path = tmp_path / "zero.toml"
    path.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="is a character device"):
        _run_with_deadline(lambda: read_toml(path))


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        read_toml(tmp_path)


def test_a_name_too_long_is_one_line(tmp_path):
    path = tmp_path / ("x" * 5000)
    with pytest.raises(ConfigError) as info:
        read_toml(path)
    message = str(info.value)
    assert "file name too long (" in message
    assert "\n" not in message and len(message) < 400


def test_missing_and_empty_names(tmp_path):
    with pytest.raises(ConfigError, match="no such cluster file"):
        read_text(tmp_path / "absent.toml", what="cluster file")
    with pytest.raises(ConfigError, match="an empty name"):
        read_text("")


def test_a_link_loop_is_one_line(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(ConfigError, match="too many levels of symbolic links"):
        read_text(tmp_path / "a")


def test_size_cap(tmp_path):
    path = tmp_path / "big.toml"
    path.write_text("# " + "x" * 5000 + "\n")
    with pytest.raises(ConfigError, match="too large"):
        read_text(path, max_bytes=1000)
    assert read_text(path, max_bytes=10_000).startswith("# x")


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * 5000 + "]" * 5000 + "\n",
        "a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n",
        "a = " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n",
    ],
    ids=["arrays-5000", "inline-tables-3000", "just-past-the-limit"],
)
def test_deep_toml_is_refused(tmp_path, text):
    path = tmp_path / "deep.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="nested more than"):
        read_toml(path)


def test_a_400_digit_integer_is_refused(tmp_path):
    path = tmp_path / "big.toml"
    path.write_text("[network]\nnic_count = " + "9" * 400 + "\n")
    with pytest.raises(ConfigError, match=r"network.nic_count has 400 digits; whole numbers must fit in 64 bits"):
        read_toml(path)


def test_a_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbfname = 'x'\n")
    assert read_toml(path) == {"name": "x"}


def test_text_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"name = '\xe9'\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 0xe9 at offset 8\)"):
        read_toml(path)


def test_json_depth_and_corruption(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nested more than"):
        read_json(deep)
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": ')
    with pytest.raises(ConfigError, match="invalid JSON at line 1"):
        read_json(bad)


def test_result_files_go_through_the_same_reader(tmp_path):
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    with pytest.raises(ResultFormatError, match="FIFO"):
        _run_with_deadline(lambda: load(fifo))
    zero = tmp_path / "z.json"
    zero.symlink_to("/dev/zero")
    with pytest.raises(ResultFormatError, match="character device"):
        _run_with_deadline(lambda: load(zero))
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps({"format": "fabricscope-result"})[:-1] + ', "x": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(ResultFormatError, match="nested more than"):
        load(deep)


def test_depth_counts_a_scalar_as_a_level_as_a_container() -> None:
    from fabricscope.userfiles import check_depth

    def nested(levels: int) -> object:
        value: object = 1
        for _ in range(levels):
            value = [value]
        return value

    check_depth(nested(MAX_DEPTH), source="x")  # the scalar at level 64
    with pytest.raises(ConfigError, match=f"nested more than {MAX_DEPTH} levels deep"):
        check_depth(nested(MAX_DEPTH + 1), source="x")
