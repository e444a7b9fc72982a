"""Who is who in logs: a rank from a file or a line only by a launcher's convention, and only
inside the job; anything else names nobody."""

from __future__ import annotations

import pytest

from frtrace.evidence.launchers import LineRanks, file_ranks, inside, ray_ranks
from frtrace.evidence.logs import TEE, parse_log


def test_a_jobs_id_a_pid_or_a_lone_number_is_never_a_rank() -> None:
    """SLURM's default slurm-<jobid>.out, a Ray worker's pid, a core worker's pid, a rotated
    log: nobody, whatever the job's size."""
    names = [
        "slurm-12994.out",
        "session_2026-11-27_03-00-00_000000_4242/logs/worker-a1b2c3d4e5f6a7b8-01000000-1234.out",
        "session_2026-11-27_03-00-00_000000_4242/logs/python-core-worker-a1b2c3d4_1234.log",
        "train.log.1",
        "node7.log",
    ]
    assert file_ranks(names, 4) == dict.fromkeys(names)
    assert file_ranks(names, None) == dict.fromkeys(names)


def test_torchrun_log_dir_folders_are_local_ranks_the_jobs_only_for_a_whole_job() -> None:
    """attempt_0/<local rank>/: the job's rank where the attempt holds all its ranks (one
    node); one node's folder of a larger job names nobody."""
    four = [f"logs/run/attempt_0/{r}/{f}" for r in range(4) for f in ("stderr.log", "error.json")]
    assert file_ranks(four, 4) == {p: int(p.split("/")[3]) for p in four}
    assert file_ranks(four, 8) == dict.fromkeys(four)  # one of two nodes: local ranks only
    assert file_ranks(four, None) == {p: int(p.split("/")[3]) for p in four}
    # gathered per host: the same run's attempt folders numbering each rank once are the job's
    split = [f"host-{'ab'[r // 2]}/logs/run/attempt_0/{r}/stderr.log" for r in range(4)]
    assert file_ranks(split, 4) == {p: int(p.split("/")[4]) for p in split}
    # two nodes' local ranks 0-1 each: nobody (which node is which is not said)
    nodes = [f"host-{h}/logs/run/attempt_0/{r}/stderr.log" for h in "ab" for r in range(2)]
    assert file_ranks(nodes, 4) == dict.fromkeys(nodes)


def test_slurm_per_task_files_are_ranks_when_they_are_the_whole_job() -> None:
    """srun --output=out_%t.log: 0..n-1 for n ranks; a gap or another count is nobody."""
    family = [f"out_{r}.log" for r in range(4)]
    assert file_ranks(family, 4) == {f"out_{r}.log": r for r in range(4)}
    assert file_ranks(family, 8) == dict.fromkeys(family)
    gap = ["out_0.log", "out_1.log", "out_3.log"]
    assert file_ranks(gap, 4) == dict.fromkeys(gap)


def test_names_that_say_rank_and_stay_inside_the_job() -> None:
    names = ["rank_3.log", "train-rank5.err", "mpi/1/rank.2/stdout", "rank_12994.log"]
    assert file_ranks(names, 4) == {
        "rank_3.log": 3,
        "train-rank5.err": None,  # outside a 4-rank job
        "mpi/1/rank.2/stdout": 2,
        "rank_12994.log": None,
    }


@pytest.mark.parametrize("master", [True, False])
def test_pytorchjob_pods_master_is_rank_0_and_worker_i_is_i_plus_1(master: bool) -> None:
    """The training operator sets RANK = index + 1 for workers when there is a master."""
    pods = ["train-worker-0.log", "train-worker-1.log", "train-worker-2.log"]
    if master:
        pods.insert(0, "train-master-0.log")
    got = file_ranks(pods, len(pods))
    want = {p: int(p[-5]) + (1 if master and "worker" in p else 0) for p in pods}
    assert got == want
    assert file_ranks(pods, 2 * len(pods)) == dict.fromkeys(pods)  # several ranks a pod


def test_indexed_job_pods_are_their_completion_index() -> None:
    pods = [f"train-{i}-{sfx}.log" for i, sfx in enumerate(["x7k2p", "9qz4m", "a1b2c"])]
    assert file_ranks(pods, 3) == {p: i for i, p in enumerate(pods)}


def test_ray_worker_files_take_their_rank_from_rays_table_never_from_the_pid() -> None:
    driver = (
        "(TrainController pid=4242) Started training worker group of size 2: \n"
        "(TrainController pid=4242) - (ip=10.0.0.1, pid=7410) world_rank=0, local_rank=0, "
        "node_rank=0\n"
        "(TorchTrainer pid=7236) - (ip=10.0.0.2, pid=3381) rank=1, local_rank=0, node_rank=1\n"
    )
    table = ray_ranks([driver])
    assert table == {7410: 0, 3381: 1}
    names = [
        "session_x/logs/worker-aaaaaaaabbbbbbbb-01000000-7410.err",
        "session_x/logs/worker-aaaaaaaabbbbbbbb-01000000-3381.out",
        "session_x/logs/worker-ccccccccdddddddd-01000000-1.out",
    ]
    assert file_ranks(names, 2, table) == dict(zip(names, [0, 1, None], strict=True))
    assert file_ranks(names, 2) == dict.fromkeys(names)  # no table: nobody
    lines = LineRanks(world=2, ray=table)
    assert lines.prefix("(RayTrainWorker pid=3381, ip=10.0.0.2) RuntimeError: boom") == (
        True,
        1,
        "RuntimeError: boom",
    )
    assert lines.prefix("(RayTrainWorker pid=999) x") == (True, None, "x")


def test_open_mpi_tags_name_the_rank_inside_the_job() -> None:
    lines = LineRanks(world=4)
    assert lines.prefix("[1,3]<stderr>: RuntimeError: x") == (True, 3, "RuntimeError: x")
    assert lines.prefix("[prterun-h-42@1,2][h:77]<stdout>: y") == (True, 2, "y")
    assert lines.prefix("[1,12994]<stdout>: z") == (True, None, "z")


def test_a_line_prefix_outside_the_job_names_nobody() -> None:
    """[rank12994]: in a 4-rank job: the failure is kept, of "a rank" (no rank)."""
    text = "[rank12994]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    said = LineRanks.of_file(text.splitlines(), TEE, 4, {})
    (failure,) = parse_log(text, "job.log", rank=None, year=None, ranks=said)
    assert failure.rank is None and "illegal memory access" in failure.message
    (inside_job,) = parse_log(text.replace("12994", "3"), "job.log", rank=None, year=None)
    assert inside_job.rank == 3


def test_tee_prefixes_of_one_node_of_a_larger_job_name_nobody() -> None:
    """[default1]: is torchrun's local rank: the job's only where the file shows all ranks."""
    text = "".join(f"[default{r}]:step 0 done\n" for r in range(2))
    text += "[default1]:RuntimeError: boom\n"
    one_node = LineRanks.of_file(text.splitlines(), TEE, 4, {})
    (f,) = parse_log(text, "node1.log", rank=None, year=None, ranks=one_node)
    assert f.rank is None
    whole = LineRanks.of_file(text.splitlines(), TEE, 2, {})
    (g,) = parse_log(text, "node1.log", rank=None, year=None, ranks=whole)
    assert g.rank == 1


def test_inside() -> None:
    assert [inside(r, 4) for r in (-1, 0, 3, 4)] == [None, 0, 3, None]
    assert inside(10**9, None) == 10**9 and inside(None, 4) is None
