"""Which world a launcher put us in, from the variables each launcher really sets."""

import pytest

from fabricscope.errors import UsageError
from fabricscope.launch import detect, expand_hostlist


def test_no_launcher():
    assert detect({}) is None
    assert detect({"PATH": "/usr/bin", "MASTER_ADDR": "10.0.0.1"}) is None


def test_torchrun():
    env = {
        "RANK": "3",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "3",
        "LOCAL_WORLD_SIZE": "4",
        "MASTER_ADDR": "node1",
        "MASTER_PORT": "29400",
        "TORCHELASTIC_RUN_ID": "abc",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }
    world = detect(env)
    assert world is not None
    assert (world.rank, world.world_size, world.local_rank, world.local_world_size) == (3, 8, 3, 4)
    assert (world.master_addr, world.master_port, world.launcher, world.agent_store) == (
        "node1",
        29400,
        "torchrun",
        True,
    )


def test_flags_override_environment():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1000"}
    world = detect(env, master_addr="b", master_port=2000)
    assert world is not None and (world.master_addr, world.master_port) == ("b", 2000)


def test_open_mpi_single_node_defaults_to_loopback_and_a_job_port():
    env = {
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "OMPI_MCA_ess_base_jobid": "1741881345",
    }
    first, second = detect(env), detect(dict(env, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0"))
    assert first is not None and second is not None
    assert first.launcher == "mpirun" and first.master_addr == "127.0.0.1"
    assert first.master_port == second.master_port
    assert 20000 <= first.master_port < 40000
    other_job = detect(dict(env, OMPI_MCA_ess_base_jobid="99"))
    assert other_job is not None and other_job.master_port != first.master_port


def test_open_mpi_across_nodes_needs_master_addr():
    env = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_SIZE": "16",
        "OMPI_COMM_WORLD_LOCAL_RANK": "5",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "8",
    }
    with pytest.raises(UsageError, match="MASTER_ADDR"):
        detect(env)
    world = detect(dict(env, MASTER_ADDR="node1"))
    assert world is not None and world.master_addr == "node1"


def test_mpich_hydra_pmi():
    env = {
        "PMI_RANK": "2",
        "PMI_SIZE": "4",
        "MPI_LOCALRANKID": "2",
        "MPI_LOCALNRANKS": "4",
        "PMI_KVSNAME": "kvs_1",
    }
    world = detect(env)
    assert world is not None and (world.launcher, world.rank, world.world_size) == ("pmi", 2, 4)


def test_slurm_step_uses_first_node_of_the_step():
    env = {
        "SLURM_PROCID": "9",
        "SLURM_NTASKS": "16",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_NODELIST": "gpu[07-08,10]",
        "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
    }
    world = detect(env)
    assert world is not None
    assert (world.launcher, world.rank, world.world_size, world.local_rank) == ("slurm", 9, 16, 1)
    assert world.master_addr == "gpu07"
    assert world.local_world_size == 8


def test_slurm_batch_script_is_not_a_world():
    # sbatch sets SLURM_PROCID=0 in the batch step too; only srun steps are worlds.
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "16", "SLURM_JOB_ID": "1"}) is None


def test_bad_rank():
    with pytest.raises(UsageError, match="rank 4 of a world of size 4"):
        detect({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "x"})


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node1", ["node1"]),
        ("node[01-03]", ["node01", "node02", "node03"]),
        ("gpu[7,9-10],cpu1", ["gpu7", "gpu9", "gpu10", "cpu1"]),
        ("a[1-2]-ib", ["a1-ib", "a2-ib"]),
        # Several bracket groups in one name (Slurm's scontrol show hostnames expands the product,
        # leftmost slowest), and commas inside brackets that do not separate hosts.
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("tux[1-3,7],gpu5", ["tux1", "tux2", "tux3", "tux7", "gpu5"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("lx[10-11],lx[20-21]", ["lx10", "lx11", "lx20", "lx21"]),
        ("r[1-2]n[1,3]g", ["r1n1g", "r1n3g", "r2n1g", "r2n3g"]),
    ],
)
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("node[1-3", "is not closed"), ("node[a-b]", "malformed Slurm hostlist range"), ("n[0-99999999]", "more than")],
)
def test_malformed_hostlists(text, fragment):
    with pytest.raises(UsageError, match=fragment):
        expand_hostlist(text)


def test_slurm_local_size_and_master_with_two_bracket_groups():
    env = {
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "8",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": "77",
        "SLURM_STEP_NODELIST": "rack[1-2]-n[01-02]",
        "SLURM_LOCALID": "1",
    }
    world = detect(env)
    assert world is not None and world.master_addr == "rack1-n01" and world.local_world_size == 2


@pytest.mark.parametrize("value", ["abc", "-1", "9" * 400, "1.5"])
def test_malformed_launcher_variables_are_refused_not_ignored(value):
    with pytest.raises(UsageError, match=r"the launcher's WORLD_SIZE=.* is not a whole number"):
        detect({"RANK": "0", "WORLD_SIZE": value})


def test_a_spawned_worlds_port_is_one_the_kernel_does_not_hand_out_on_its_own(tmp_path, monkeypatch) -> None:
    """bind(0) ports come from the ephemeral range, where any outgoing connection may take one before rank 0
    binds it ("The server socket has failed to listen", seen under a parallel test run): free_port picks below."""
    import socket

    from fabricscope.launch import world

    low = world._ephemeral_low()
    ports = {world.free_port() for _ in range(20)}
    for port in ports:
        assert world.LOWEST_PORT <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # still free: nothing holds what free_port hands out
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("1024\t65535\n")  # no room below the range: bind(0) as before
    monkeypatch.setattr(world, "EPHEMERAL_RANGE", str(ranges))
    assert world._ephemeral_low() == 1024 and 1024 <= world.free_port() <= 65535
    ranges.write_text("garbage")
    assert world._ephemeral_low() == 32768
