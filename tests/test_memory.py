"""Memory in a container: the cgroup limit caps what bench sizes its buffers by."""

from __future__ import annotations

from pathlib import Path

from fabricscope.memory import available_bytes, cgroup_room_bytes

GIB = 1 << 30


def _put(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_takes_the_tightest_limit_up_the_tree(tmp_path):
    _put(tmp_path, "proc/self/cgroup", "0::/kubepods/pod7/job\n")
    _put(tmp_path, "sys/fs/cgroup/kubepods/pod7/job/memory.max", "max\n")
    _put(tmp_path, "sys/fs/cgroup/kubepods/pod7/job/memory.current", str(GIB))
    _put(tmp_path, "sys/fs/cgroup/kubepods/pod7/memory.max", str(3 * GIB))  # the pod's 3 GiB
    _put(tmp_path, "sys/fs/cgroup/kubepods/pod7/memory.current", str(GIB // 2))
    assert cgroup_room_bytes(str(tmp_path)) == 3 * GIB - GIB // 2
    assert available_bytes(str(tmp_path)) <= 3 * GIB


def test_cgroup_v1_memory_controller(tmp_path):
    _put(tmp_path, "proc/self/cgroup", "5:cpu,cpuacct:/slurm/job9\n4:memory:/slurm/job9\n")
    _put(tmp_path, "sys/fs/cgroup/memory/slurm/job9/memory.limit_in_bytes", str(8 * GIB))
    _put(tmp_path, "sys/fs/cgroup/memory/slurm/job9/memory.usage_in_bytes", str(2 * GIB))
    _put(tmp_path, "sys/fs/cgroup/memory/memory.limit_in_bytes", str(9223372036854771712))  # v1's "no limit"
    assert cgroup_room_bytes(str(tmp_path)) == 6 * GIB


def test_no_limit_or_no_cgroup_means_the_hosts_memory(tmp_path):
    assert cgroup_room_bytes(str(tmp_path)) is None
    _put(tmp_path, "proc/self/cgroup", "0::/\n")
    _put(tmp_path, "sys/fs/cgroup/memory.max", "max\n")
    assert cgroup_room_bytes(str(tmp_path)) is None
    assert available_bytes(str(tmp_path)) > 0


def test_garbage_is_ignored_not_fatal(tmp_path):
    _put(tmp_path, "proc/self/cgroup", "nonsense\n0::/a/../../b\n")
    _put(tmp_path, "sys/fs/cgroup/a/memory.max", "lots")
    assert cgroup_room_bytes(str(tmp_path)) is None
