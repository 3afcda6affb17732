"""wsync.Publisher(part=(rank, world)): the ranks of a sharded trainer publish
one version together, against a real hub."""
import subprocess
import threading

import numpy as np
import pytest

import wsync


def shard(rank, step):
    return {f"layers.{rank}.weight": np.full((4, 8), step + rank, np.float32)}


def publish_all(endpoint, world, step, timeout=30, sign_key=None):
    """Every rank publishes its shard at step in a thread of its own; [version or error]."""
    out = [None] * world

    def rank_main(rank):
        with wsync.Publisher("policy", endpoint=endpoint, part=(rank, world),
                             sign_key=sign_key) as pub:
            try:
                out[rank] = pub.publish(shard(rank, step), meta={"step": step}, group=step,
                                        timeout=timeout)
            except wsync.WsyncError as e:
                out[rank] = e

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_two_ranks_publish_one_version_holding_both_shards(hub, tmp_path):
    assert publish_all(hub.endpoint, 2, 10) == [1, 1]
    assert publish_all(hub.endpoint, 2, 11) == [2, 2]
    wsync.pull("policy", str(tmp_path / "p.wsync"), endpoint=hub.endpoint)
    tensors, meta = wsync.read(str(tmp_path / "p.wsync"))
    assert sorted(tensors) == ["layers.0.weight", "layers.1.weight"]
    assert np.array_equal(tensors["layers.1.weight"], shard(1, 11)["layers.1.weight"])
    assert meta == {"step": "11"}


def test_a_step_not_above_the_last_is_refused_for_every_rank(hub):
    assert publish_all(hub.endpoint, 1, 5) == [1]
    (e,) = publish_all(hub.endpoint, 1, 5)
    assert isinstance(e, wsync.DataError) and e.status == 65
    assert "group 5 (part 0 of 1) is not above the last group committed, 5" in str(e)


def test_a_rank_alone_times_out_naming_the_missing_part(hub):
    with wsync.Publisher("policy", endpoint=hub.endpoint, part=(0, 2)) as pub:
        with pytest.raises(wsync.TimedOut) as e:
            pub.publish(shard(0, 1), group=1, timeout=1)
    assert "part 1 of 2 missing after 1.0 s; nothing committed" in str(e.value)


def test_group_without_part_and_part_without_group_are_usage_errors(hub):
    with wsync.Publisher("policy", endpoint=hub.endpoint) as pub:
        with pytest.raises(wsync.UsageError):
            pub.publish(shard(0, 1), group=1)
    with wsync.Publisher("policy", endpoint=hub.endpoint, part=(0, 2)) as pub:
        with pytest.raises(wsync.UsageError):
            pub.publish(shard(0, 1))
    with pytest.raises(wsync.UsageError):
        wsync.Publisher("policy", endpoint=hub.endpoint, part=(2, 2))


def test_ranks_signing_their_parts_make_a_version_a_verifying_pull_takes(hub, tmp_path):
    subprocess.run(["wsync-keygen", "--sign", str(tmp_path / "trainer")], check=True,
                   stdout=subprocess.DEVNULL)
    assert publish_all(hub.endpoint, 2, 12, sign_key=str(tmp_path / "trainer.key")) == [1, 1]
    assert wsync.pull("policy", str(tmp_path / "p.wsync"), endpoint=hub.endpoint,
                      verify_key=str(tmp_path / "trainer.pub")) == 1


def test_seq_with_group_is_a_usage_error(hub, tmp_path):
    subprocess.run(["wsync-keygen", "--sign", str(tmp_path / "trainer")], check=True,
                   stdout=subprocess.DEVNULL)
    with wsync.Publisher("policy", endpoint=hub.endpoint, part=(0, 1),
                         sign_key=str(tmp_path / "trainer.key")) as pub:
        with pytest.raises(wsync.UsageError) as e:
            pub.publish(shard(0, 1), group=1, seq=1)
    assert str(e.value) == "seq goes with a whole publish: a part is signed for its group"
