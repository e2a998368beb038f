"""Collective (all-reduce) data-parallel regression on CPU with the gloo backend.

Every replica runs this same program; PaddleCloud gives each one (see README.md):

    PADDLE_TRAINER_ID  PADDLE_TRAINERS_NUM  PADDLE_TRAINER_ENDPOINTS
    PADDLE_CURRENT_ENDPOINT  PADDLE_MASTER (rank 0's endpoint)
    PADDLE_DISTRI_BACKEND=gloo

Optional: PADDLE_INIT_NUM_PASSES (epochs, default 10), PADDLE_JOB_NAME,
PADDLE_PFS_HOME (rank 0 saves to $PADDLE_PFS_HOME/models/<job>/, else ./output/).

After every epoch each rank prints one machine-readable line for the job page:

    PADDLECLOUD_METRIC {"step": 3, "loss": 12.34}
"""

import json
import os
import sys

import numpy as np
import paddle
import paddle.distributed as dist

NUM_FEATURES = 13
NUM_SAMPLES = 2048  # whole synthetic data set, split across ranks
BATCH_SIZE = 32
LEARNING_RATE = 0.01
SEED = 42


def check_env():
    """Fail loudly instead of silently training alone on a half-configured replica."""
    required = (
        "PADDLE_TRAINER_ID",
        "PADDLE_TRAINERS_NUM",
        "PADDLE_TRAINER_ENDPOINTS",
        "PADDLE_CURRENT_ENDPOINT",
        "PADDLE_MASTER",
    )
    missing = [name for name in required if not os.environ.get(name)]
    if missing:
        sys.exit(f"collective: missing environment variables: {', '.join(missing)}")
    # gloo is the CPU backend. With the default "auto" a CPU-only build creates
    # no process group and the first all-reduce fails.
    os.environ.setdefault("PADDLE_DISTRI_BACKEND", "gloo")


def make_data(rank, world_size):
    """Synthetic regression data: y = x.w + b + noise, generated from a fixed seed.

    Each rank keeps the rows with index % world_size == rank. All-reduce
    training needs every rank to run the same number of steps, so the shards
    are cut to equal length.
    """
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((NUM_SAMPLES, NUM_FEATURES)).astype("float32")
    true_w = rng.uniform(-4.0, 4.0, (NUM_FEATURES, 1)).astype("float32")
    noise = rng.normal(0.0, 2.0, (NUM_SAMPLES, 1)).astype("float32")
    y = x @ true_w + 22.5 + noise
    per_rank = NUM_SAMPLES // world_size
    return x[rank::world_size][:per_rank], y[rank::world_size][:per_rank]


def output_dir():
    job = os.environ.get("PADDLE_JOB_NAME") or "collective"
    pfs_home = os.environ.get("PADDLE_PFS_HOME")
    if pfs_home:
        return os.path.join(pfs_home, "models", job)
    return os.path.abspath("output")


def main():
    check_env()
    paddle.set_device("cpu")
    # Rank 0 serves a TCP store on PADDLE_MASTER; the ranks meet there and set
    # up the gloo process group.
    dist.init_parallel_env()
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    epochs = int(os.environ.get("PADDLE_INIT_NUM_PASSES", "10"))

    x, y = make_data(rank, world_size)
    # Same initial weights everywhere (DataParallel also broadcasts rank 0's).
    paddle.seed(SEED)
    net = paddle.nn.Linear(NUM_FEATURES, 1)
    model = paddle.DataParallel(net)
    optimizer = paddle.optimizer.SGD(
        learning_rate=LEARNING_RATE, parameters=model.parameters()
    )
    loss_fn = paddle.nn.MSELoss()
    rng = np.random.default_rng(SEED + rank)

    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x))
        losses = []
        for start in range(0, len(x), BATCH_SIZE):
            idx = order[start : start + BATCH_SIZE]
            loss = loss_fn(model(paddle.to_tensor(x[idx])), paddle.to_tensor(y[idx]))
            loss.backward()  # DataParallel all-reduces the gradients here
            optimizer.step()
            optimizer.clear_grad()
            losses.append(float(loss))
        mean_loss = float(np.mean(losses))
        print(f"rank {rank} epoch {epoch} loss {mean_loss:.4f}", flush=True)
        print(
            "PADDLECLOUD_METRIC " + json.dumps({"step": epoch, "loss": mean_loss}),
            flush=True,
        )

    if rank == 0:
        out = output_dir()
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, "model.pdparams")
        # Load with net.set_state_dict(paddle.load(path)).
        paddle.save(net.state_dict(), path)
        print(f"rank 0 saved the model to {path}", flush=True)


if __name__ == "__main__":
    main()
