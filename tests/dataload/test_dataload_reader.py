"""The reader reads what it reports: bytes equal file sizes, the kernel's page cache agrees."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from dataload_helpers import data_files, ramfs, write_random

from fabricscope.dataload import pagecache
from fabricscope.dataload.dataset import scan
from fabricscope.dataload.reader import ReadConfig, read_dataset
from fabricscope.dataload.report import notes, status
from fabricscope.errors import UsageError


@pytest.mark.parametrize(
    ("workers", "block_size", "random", "direct"),
    [
        (1, 1 << 20, False, False),
        (3, 4096, False, True),
        (4, 64 << 10, True, False),
        (2, 1 << 20, True, True),
        (7, 512, False, False),
    ],
)
def test_one_pass_reads_exactly_the_file(big_file, workers, block_size, random, direct):
    dataset = scan(str(big_file))
    measurement = read_dataset(
        dataset, ReadConfig(workers=workers, block_size=block_size, random=random, direct=direct, seed=1)
    )
    [one] = measurement.passes
    assert one.bytes == big_file.stat().st_size == measurement.bytes
    assert one.files == 1 and one.complete
    assert one.seconds > 0 and one.bytes_per_s == pytest.approx(one.bytes / one.seconds)
    assert measurement.direct_files == (min(workers, -(-one.bytes // block_size)) if direct else 0)
    assert measurement.fallback_files == 0 and not measurement.errors


def test_a_data_set_tree_is_read_whole_and_only_its_regular_files(tree):
    expected = data_files(tree)
    dataset = scan(str(tree))
    assert sorted(f.path for f in dataset.files) == sorted(str(p) for p in expected)
    assert dataset.skipped == {"FIFO": 1, "character device": 1, "link to a directory": 1}
    measurement = read_dataset(dataset, ReadConfig(workers=4, block_size=8192, random=True, seed=3))
    [one] = measurement.passes
    assert one.bytes == sum(p.stat().st_size for p in expected)
    assert one.files == len(expected) == 243
    assert status(measurement) == "complete"


def test_links_to_directories_are_not_followed(tree):
    dataset = scan(str(tree / "train"))
    assert not any("loop" in f.path for f in dataset.files)
    assert dataset.skipped.get("link to a directory") == 1


def test_a_tree_nested_thousands_deep_is_walked(tmp_path):
    # Deeper than Python's recursion limit; built and removed with loops (os.makedirs and
    # shutil.rmtree recurse once per level).
    folders = [tmp_path / "deep"]
    for _ in range(1500):
        folders.append(folders[-1] / "d")
    try:
        for folder in folders:
            folder.mkdir()
        write_random(folders[-1] / "leaf.bin", 5000)
        dataset = scan(str(folders[0]))
        assert [f.size for f in dataset.files] == [5000]
    finally:
        (folders[-1] / "leaf.bin").unlink(missing_ok=True)
        for folder in reversed(folders):
            if folder.exists():
                folder.rmdir()


def test_dropping_the_cache_then_a_buffered_read_fills_it(big_file):
    """The pages the kernel now holds are the pages we said we read."""
    dataset = scan(str(big_file))
    measurement = read_dataset(dataset, ReadConfig(drop_cache=True))
    [one] = measurement.passes
    assert one.dropped_files == 1
    assert one.cached_fraction_before is not None and one.cached_fraction_before < 0.1
    after = pagecache.cached_fraction(dataset.files)
    assert after is not None and after > 0.9
    assert any("dropped before each pass" in line for line in notes(measurement))


def test_a_direct_read_leaves_the_page_cache_empty(big_file):
    dataset = scan(str(big_file))
    pagecache.drop(dataset.files)
    measurement = read_dataset(dataset, ReadConfig(direct=True, workers=2))
    assert measurement.bytes == big_file.stat().st_size
    assert measurement.direct_files == 2
    after = pagecache.cached_fraction(dataset.files)
    assert after is not None and after < 0.1
    assert notes(measurement)[0].startswith("O_DIRECT: every read bypassed the page cache")


def test_a_cached_file_is_called_a_page_cache_figure(big_file):
    dataset = scan(str(big_file))
    read_dataset(dataset, ReadConfig())  # warm it
    measurement = read_dataset(dataset, ReadConfig())
    assert measurement.passes[0].cached_fraction_before == pytest.approx(1.0)
    assert any("mostly memory's, not the storage's" in line for line in notes(measurement))


def test_a_small_cold_file_is_said_to_fit_in_memory(big_file):
    dataset = scan(str(big_file))
    pagecache.drop(dataset.files)
    measurement = read_dataset(dataset, ReadConfig())
    lines = notes(measurement, memory_available=1 << 40)
    assert any("a second read would come from the cache" in line for line in lines)


def test_duration_repeats_passes_and_every_full_pass_reads_everything(tree):
    dataset = scan(str(tree))
    measurement = read_dataset(dataset, ReadConfig(workers=2, block_size=4096, duration_s=0.6))
    assert len(measurement.passes) >= 2
    for one in measurement.passes:
        if one.complete:
            assert one.bytes == dataset.total_bytes and one.files == len(dataset.files)
        else:
            assert one is measurement.passes[-1] and one.bytes <= dataset.total_bytes
    assert measurement.bytes == sum(p.bytes for p in measurement.passes)
    assert [p.index for p in measurement.passes] == list(range(1, len(measurement.passes) + 1))
    # A pass that read every byte is complete even when the deadline came as it ended (it was "stopped
    # mid-pass" whenever the stop flag was up at its end); only the last can be stopped, and none failed.
    for one in measurement.passes:
        assert one.complete == (one.bytes == dataset.total_bytes) and one.failed_reads == 0
        assert one.stopped == (not one.complete)


def test_o_direct_refused_falls_back_and_says_so(tmp_path):
    with ramfs(tmp_path / "ram") as mount:
        data = write_random(mount / "x.bin", 1 << 20)
        measurement = read_dataset(scan(str(data)), ReadConfig(direct=True, workers=2, block_size=64 << 10))
        assert measurement.bytes == 1 << 20
        assert measurement.direct_files == 0 and measurement.fallback_files == 2
        assert measurement.fallback_reason == "Invalid argument"
        assert notes(measurement)[0].startswith("O_DIRECT was refused for 2 file open(s) (Invalid argument)")


def test_a_file_gone_between_scan_and_read_is_an_error_not_a_crash(tree):
    dataset = scan(str(tree))
    victim = Path(dataset.files[5].path)
    victim.unlink()
    measurement = read_dataset(dataset, ReadConfig(workers=2))
    assert measurement.error_count == 1 and "No such file" in measurement.errors[0]
    assert measurement.bytes == dataset.total_bytes - dataset.files[5].size
    assert status(measurement) == "partial" and not measurement.passes[0].complete
    assert measurement.passes[0].failed_reads == 1 and not measurement.passes[0].stopped  # a failed read, no stop


def test_a_file_gone_is_named_once_however_many_passes_meet_it(tree):
    dataset = scan(str(tree))
    Path(dataset.files[5].path).unlink()
    measurement = read_dataset(dataset, ReadConfig(workers=2, duration_s=0.5))
    assert len(measurement.passes) >= 2 and measurement.error_count >= 2
    assert len(measurement.errors) == 1 and "No such file" in measurement.errors[0]


def test_ctrl_c_keeps_what_was_read(big_file):
    calls = itertools.count()

    def progress(done: int) -> None:
        if next(calls) == 3:
            raise KeyboardInterrupt

    measurement = read_dataset(scan(str(big_file)), ReadConfig(block_size=4096, duration_s=30), progress=progress)
    assert measurement.interrupted and status(measurement) == "interrupted"
    assert measurement.bytes > 0 and measurement.seconds < 30
    assert measurement.bytes == sum(p.bytes for p in measurement.passes)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"workers": 0}, "workers must be 1 to 256, got 0"),
        ({"block_size": 0}, "block size must be 512 B to 256 MiB, got 0 B"),
        ({"block_size": 6000, "direct": True}, "multiple of 4096 .*, got 6000"),
        ({"duration_s": 0.0}, "duration must be 0.1 s to"),
        ({"workers": 64, "block_size": 128 << 20}, "at most 4G is allowed"),
    ],
)
def test_the_config_refuses_impossible_values(kwargs, fragment):
    with pytest.raises(UsageError, match=fragment):
        ReadConfig(**kwargs)


def test_many_passes_share_records_and_lose_no_byte(tmp_path):
    from fabricscope.dataload.report import RECORDS_KEPT, to_result

    small = write_random(tmp_path / "tiny.bin", 8192)
    measurement = read_dataset(scan(str(small)), ReadConfig(block_size=4096, duration_s=1.0))
    result = to_result(measurement)
    assert len(result.records) == min(RECORDS_KEPT, len(measurement.passes))
    assert sum(r["passes"] for r in result.records) == len(measurement.passes) == result.summary["passes"]
    assert sum(r["bytes"] for r in result.records) == measurement.bytes == result.summary["bytes"]
    assert all(r["bytes"] == 8192 and r["passes"] == 1 for r in result.records[:-1])


def test_grouping_passes():
    from fabricscope.dataload.reader import Pass
    from fabricscope.dataload.report import group_passes

    passes = [
        Pass(index=i, bytes=10, seconds=0.5, files=1, complete=i < 250, cached_fraction_before=i / 250)
        for i in range(1, 251)
    ]
    assert [(g.first, g.count) for g in group_passes(passes[:3], 3)] == [(1, 1), (2, 1), (3, 1)]
    groups = group_passes(passes, 3)
    assert [(g.first, g.count) for g in groups] == [(1, 1), (2, 1), (3, 248)]
    rest = groups[-1]
    assert rest.bytes == 2480 and rest.seconds == 124 and rest.bytes_per_s == 20 and rest.files == 248
    assert not rest.complete and groups[0].complete
    assert rest.cached_fraction_before == pytest.approx(sum(range(3, 251)) / 250 / 248)


@pytest.mark.parametrize("in_memory", [1 << 20, 8])
def test_random_order_reads_every_block_once(monkeypatch, in_memory):
    """Shuffled as a list, or (large extents) along an affine permutation: each offset exactly once."""
    import random

    from fabricscope.dataload import reader

    monkeypatch.setattr(reader, "SHUFFLE_IN_MEMORY", in_memory)
    bs = 4096
    start, end = 3 * bs, 3 * bs + 997 * bs + 123  # 998 blocks, the last one short
    order = list(reader._shuffled(start, end, bs, random.Random(11)))
    assert sorted(order) == list(range(start, end, bs))
    assert order != sorted(order)
    steps = [b - a for a, b in itertools.pairwise(order)]
    assert sum(1 for step in steps if step == bs) < len(steps) // 10  # not a sequential walk
