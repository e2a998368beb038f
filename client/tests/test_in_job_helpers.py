"""In-job helpers: the process contract (current and legacy names, trainer_id files), data
sharding, split/convert, dist_reader, and log_metric's line as the server parses it."""

from __future__ import annotations

import io
import marshal
import os
import pickle
import subprocess
import sys

import pytest

from paddlectl import dataset, log_metric, runtime

from .conftest import CLIENT_DIR

PS_TRAINER = {"TRAINING_ROLE": "TRAINER", "PADDLE_PSERVERS_IP_PORT_LIST": "10.0.0.1:6000,10.0.0.2:6000",
              "PADDLE_TRAINERS_NUM": "4", "PADDLE_TRAINER_ID": "2", "POD_IP": "10.0.0.9", "PADDLE_PORT": "6100",
              "PADDLE_TRAINER_ENDPOINTS": "a:1,b:2,c:3,d:4", "PADDLE_JOB_NAME": "fit",
              "PADDLE_CLOUD_CURRENT_DATACENTER": "dc1", "PADDLE_CLOUD_USERNAME": "alice", "PADDLE_INIT_NUM_PASSES": "7",
              "PADDLE_INIT_USE_GPU": "0"}


def test_process_contract_current_names():
    info = runtime.cluster(PS_TRAINER)
    assert (info.role, info.trainer_id, info.trainer_count) == ("trainer", 2, 4)
    assert info.pservers == ["10.0.0.1:6000", "10.0.0.2:6000"]
    assert info.trainers == ["a:1", "b:2", "c:3", "d:4"]
    assert info.current_endpoint == "10.0.0.9:6100"
    assert (info.job_name, info.datacenter, info.username, info.num_passes, info.use_gpu) == (
        "fit", "dc1", "alice", 7, False)
    assert info.pfs_home == "/pfs/dc1/home/alice"
    assert runtime.is_pserver({"TRAINING_ROLE": "PSERVER"}) and not runtime.is_chief(PS_TRAINER)
    assert runtime.is_chief({"PADDLE_TRAINER_ID": "0"})


def test_process_contract_legacy_names():
    env = {"TRAINER_ID": "1", "TRAINERS": "3", "PADDLE_INIT_PSERVERS": "10.1.9.3,10.1.32.9", "PADDLE_INIT_PORT": "7164"}
    assert (runtime.trainer_id(env=env), runtime.trainer_count(env=env)) == (1, 3)
    assert runtime.pserver_endpoints(env) == ["10.1.9.3:7164", "10.1.32.9:7164"]
    old = {"PADDLE_INIT_TRAINER_ID": "5", "PADDLE_INIT_NUM_GRADIENT_SERVERS": "8"}
    assert (runtime.trainer_id(env=old), runtime.trainer_count(env=old)) == (5, 8)
    with pytest.raises(ValueError, match="TRAINER_ID"):
        runtime.trainer_id(env={"TRAINER_ID": "one"})


def test_trainer_files_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (runtime.trainer_id(env={}), runtime.trainer_count(env={})) == (0, 1)  # a local run
    (tmp_path / "trainer_id").write_text("3\n")
    (tmp_path / "trainer_count").write_text("5\n")
    assert (runtime.trainer_id(env={}), runtime.trainer_count(env={})) == (3, 5)
    assert runtime.trainer_id(env={"PADDLE_TRAINER_ID": "1"}) == 1  # the environment comes first


def test_pfs_paths_map_to_the_local_home():
    env = {"PADDLE_PFS_HOME": "/var/pfs/dc1/home/alice", "PADDLE_CLOUD_CURRENT_DATACENTER": "dc1",
           "PADDLE_CLOUD_USERNAME": "alice"}
    assert runtime.pfs_home(env) == "/var/pfs/dc1/home/alice"
    assert runtime.pfs_path("/pfs/dc1/home/alice/data/x", env) == "/var/pfs/dc1/home/alice/data/x"
    assert runtime.pfs_path("/pfs/dc1/public/x", env) == "/pfs/dc1/public/x"


def test_input_and_output_dirs_of_the_seed_forms_are_found_where_the_process_sees_them():
    env = {"PADDLE_PFS_HOME": "/var/pfs/dc1/home/alice", "PADDLE_CLOUD_CURRENT_DATACENTER": "dc1",
           "PADDLE_CLOUD_USERNAME": "alice", "PADDLE_INPUT_DIR": "/pfs/dc1/home/alice/in",
           "PADDLE_OUTPUT_DIR": "/pfs/dc1/home/alice/out"}
    assert runtime.input_dir(env) == "/var/pfs/dc1/home/alice/in"
    assert runtime.output_dir(env) == "/var/pfs/dc1/home/alice/out"
    assert runtime.input_dir({}) is None and runtime.output_dir({}) is None


def test_home_spellings_and_directories_inside_the_home():
    from paddlectl.pfs_paths import home_form, in_home

    assert home_form("/pfs/dc1/user/alice/x") == "/pfs/dc1/home/alice/x"
    assert home_form("/pfs/dc1/public/user/x") == "/pfs/dc1/public/user/x"
    assert home_form("relative/user/x") == "relative/user/x"
    home = "/pfs/dc1/home/alice"
    assert in_home(home, "/quickstart/input") == "/pfs/dc1/home/alice/quickstart/input"
    assert in_home(home, "./out/") == "/pfs/dc1/home/alice/out"
    assert in_home(home, "/pfs/dc1/user/alice//in/./x") == "/pfs/dc1/home/alice/in/x"
    assert in_home(home, "/pfs/dc1/public/data") == "/pfs/dc1/public/data"
    for bad in ("../bob", "/pfs/dc1/home/alice/../bob", "a/../../b"):
        with pytest.raises(ValueError, match="'..' is not allowed"):
            in_home(home, bad)


def _uci():
    def reader():
        for i in range(23):
            yield (i, i * 1.5)
    return reader


def test_split_then_cluster_files_reader_shards_by_trainer(tmp_path):
    names = dataset.split(_uci(), line_count=5, suffix=str(tmp_path / "uci_housing" / "train-%05d.pickle"))
    assert [os.path.basename(n) for n in names] == [f"train-{i:05d}.pickle" for i in range(5)]
    pattern = str(tmp_path / "uci_housing" / "train-*.pickle")
    shards = [list(dataset.cluster_files_reader(pattern, trainer_count=2, trainer_id=t)()) for t in (0, 1)]
    assert shards[0] == [(i, i * 1.5) for i in list(range(0, 5)) + list(range(10, 15)) + list(range(20, 23))]
    assert sorted(shards[0] + shards[1]) == list(_uci()())
    # seed 004's spelling, and a custom dumper/loader pair
    dataset.split(_uci(), 10, str(tmp_path / "m-%05d.marshal"), dumper=marshal.dump)
    got = dataset.cluster_files_reader(str(tmp_path / "m-*.marshal"), trainer_count=1, train_id=0,
                                       loader=marshal.load)()
    assert [tuple(x) for x in got] == list(_uci()())
    with pytest.raises(ValueError, match="placeholder"):
        dataset.split(_uci(), 5, "no-number.pickle")
    with pytest.raises(ValueError, match="out of range"):
        dataset.shard_files(pattern, trainer_count=2, trainer_id=2)


def test_cluster_files_reader_defaults_to_the_job_environment(tmp_path, monkeypatch):
    dataset.split(_uci(), 4, str(tmp_path / "d-%05d.pickle"))
    monkeypatch.setenv("PADDLE_INIT_NUM_GRADIENT_SERVERS", "3")
    monkeypatch.setenv("PADDLE_INIT_TRAINER_ID", "1")
    assert dataset.shard_files(str(tmp_path / "d-*.pickle")) == [str(tmp_path / f"d-{i:05d}.pickle") for i in (1, 4)]


def test_dist_reader_partitions_lines(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("".join(f"{i},{i * 2},0.5\n" for i in range(10)))
    parts = [list(dataset.dist_reader(str(path), trainers=3, trainer_id=t)()) for t in range(3)]
    assert parts[0] == [(0, 0, 0.5), (3, 6, 0.5), (6, 12, 0.5), (9, 18, 0.5)]
    assert sorted(parts[0] + parts[1] + parts[2]) == [(i, i * 2, 0.5) for i in range(10)]


def test_convert_writes_recordio_shards_and_trainers_read_them_back(tmp_path):
    names = dataset.convert(str(tmp_path / "dataset"), _uci(), line_count=5, name_prefix="uci_housing_train")
    assert [os.path.basename(n) for n in names] == [f"uci_housing_train-{i:05d}-of-00005" for i in range(5)]
    pattern = str(tmp_path / "dataset" / "uci_housing_train*")
    shards = [list(dataset.recordio_reader(pattern, 2, t)()) for t in (0, 1)]
    assert len(shards[0]) == 13 and len(shards[1]) == 10
    assert sorted(shards[0] + shards[1]) == list(_uci()())
    assert not [n for n in os.listdir(tmp_path / "dataset") if n.startswith(".")]  # no leftovers


def test_log_metric_prints_the_line_the_server_parses():
    from jobs.live.metrics import parse_line

    out = io.StringIO()
    line = log_metric(3, file=out, loss=0.25, acc=0.9)
    assert out.getvalue() == line + "\n"
    assert line == 'PADDLECLOUD_METRIC {"step": 3, "loss": 0.25, "acc": 0.9}'
    assert parse_line(line.encode()) == {"step": 3.0, "loss": 0.25, "acc": 0.9}
    assert parse_line(log_metric(4, file=io.StringIO(), loss=float("nan")).encode()) == {"step": 4.0}
    with pytest.raises(TypeError):
        log_metric(1, file=io.StringIO(), loss="high")
    with pytest.raises(ValueError):
        log_metric(1, file=io.StringIO())


def test_in_job_modules_need_neither_httpx_nor_django():
    code = ("import sys; sys.modules['httpx'] = None; sys.modules['django'] = None; sys.modules['rich'] = None\n"
            "import paddlectl\nfrom paddlectl import runtime, dataset, recordio, log_metric\n"
            "log_metric(1, loss=2)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=CLIENT_DIR,
                         env={**os.environ, "PYTHONPATH": str(CLIENT_DIR)})
    assert out.returncode == 0, out.stderr
    assert out.stdout == 'PADDLECLOUD_METRIC {"step": 1, "loss": 2.0}\n'


def test_the_package_never_imports_django():
    for path in (CLIENT_DIR / "paddlectl").rglob("*.py"):
        text = path.read_text()
        assert "import django" not in text and "from django" not in text, path


def test_pickle_default_matches_seed_loader(tmp_path):
    # split() writes one pickled list per file, as paddle.v2.dataset.common did
    name = dataset.split(_uci(), 100, str(tmp_path / "all-%05d.pickle"))[0]
    with open(name, "rb") as f:
        assert pickle.load(f) == list(_uci()())
