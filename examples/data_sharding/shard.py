"""Show how a trainer picks its share of the data files (PaddleCloud conventions).

Every trainer of a job sees the same files under the user's PFS home. Each one
sorts the files matching a glob and keeps those with index % trainer_count ==
trainer_id, so the trainers read disjoint shards without talking to each other.

The trainer id and count come from the environment (TRAINER_ID, TRAINERS) and
from the files `trainer_id` / `trainer_count` in the working directory; both are
written by PaddleCloud and must agree when both are present.

Usage: python3 shard.py [GLOB]      (GLOB is relative to the PFS home,
                                     default: $DATA_GLOB or "data/part-*")
No third-party dependencies: runs with a plain python3.
"""

import glob
import gzip
import os
import sys

DEFAULT_GLOB = "data/part-*"


def fail(message):
    sys.exit(f"data_sharding: {message}")


def read_int_file(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read().strip()
    try:
        return int(text)
    except ValueError:
        fail(f"{path} should hold an integer, got {text!r}")


def read_int_env(name):
    value = os.environ.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        fail(f"${name} should be an integer, got {value!r}")


def pick(what, env_name, env_value, file_name, file_value):
    shown = ["unset" if v is None else v for v in (env_value, file_value)]
    print(f"{what}: ${env_name}={shown[0]}, ./{file_name}={shown[1]}")
    if env_value is not None and file_value is not None and env_value != file_value:
        fail(f"${env_name} ({env_value}) and ./{file_name} ({file_value}) disagree")
    value = env_value if env_value is not None else file_value
    if value is None:
        fail(f"neither ${env_name} nor ./{file_name} is set")
    return value


def trainer_identity():
    trainer_id = pick(
        "trainer id",
        "TRAINER_ID",
        read_int_env("TRAINER_ID"),
        "trainer_id",
        read_int_file("trainer_id"),
    )
    trainer_count = pick(
        "trainer count",
        "TRAINERS",
        read_int_env("TRAINERS"),
        "trainer_count",
        read_int_file("trainer_count"),
    )
    if trainer_count < 1 or not 0 <= trainer_id < trainer_count:
        fail(f"invalid trainer id {trainer_id} for {trainer_count} trainers")
    return trainer_id, trainer_count


def pfs_home():
    """The user's PFS home: /pfs/<datacenter>/home/<user>/ in a cluster.

    Locally PaddleCloud passes it as $PADDLE_PFS_HOME because /pfs may not
    exist on the host.
    """
    home = os.environ.get("PADDLE_PFS_HOME")
    if not home:
        datacenter = os.environ.get("PADDLE_CLOUD_CURRENT_DATACENTER")
        user = os.environ.get("PADDLE_CLOUD_USERNAME")
        if datacenter and user:
            home = os.path.join("/pfs", datacenter, "home", user)
    if not home or not os.path.isdir(home):
        fail(f"PFS home not found (PADDLE_PFS_HOME={home!r})")
    return home


def my_shard(pattern, trainer_id, trainer_count):
    files = sorted(f for f in glob.glob(pattern) if os.path.isfile(f))
    if not files:
        fail(f"no files match {pattern}")
    return files, [
        f for idx, f in enumerate(files) if idx % trainer_count == trainer_id
    ]


def count_lines(path):
    """Count lines in constant memory; *.gz files are decompressed on the fly."""
    opener = gzip.open if path.endswith(".gz") else open
    lines = 0
    last = b"\n"
    with opener(path, "rb") as f:
        while chunk := f.read(1 << 20):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")  # a last line without a newline still counts


def main():
    trainer_id, trainer_count = trainer_identity()
    relative = (
        sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DATA_GLOB", DEFAULT_GLOB)
    )
    pattern = os.path.join(pfs_home(), relative)
    all_files, mine = my_shard(pattern, trainer_id, trainer_count)

    print(
        f"trainer {trainer_id}/{trainer_count}: "
        f"{len(mine)} of {len(all_files)} files match {pattern}"
    )
    total = 0
    for path in mine:
        lines = count_lines(path)
        total += lines
        print(f"  {path}: {lines} lines")
    print(f"trainer {trainer_id} total: {total} lines in {len(mine)} files", flush=True)

    # Like the seed's gen_train_list(): leave the shard's file list for the
    # training code. Named per trainer in case replicas share a directory.
    with open(f"train-{trainer_id}.list", "w") as f:
        f.write("".join(p + "\n" for p in mine))


if __name__ == "__main__":
    main()
