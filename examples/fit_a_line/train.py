"""fit_a_line: linear regression on UCI-housing-like data, parameter-server mode.

Runs as either a parameter server or a trainer, chosen by the environment that
PaddleCloud gives every replica (see README.md):

    TRAINING_ROLE=PSERVER|TRAINER     PADDLE_PSERVERS_IP_PORT_LIST=h:p,...
    PADDLE_TRAINERS_NUM  PADDLE_TRAINER_ID  PADDLE_TRAINER_ENDPOINTS
    POD_IP  PADDLE_PORT  (a pserver binds POD_IP:PADDLE_PORT)

Optional: PADDLE_INIT_NUM_PASSES (default 10), PADDLE_JOB_NAME,
PADDLE_PFS_HOME (the model goes to $PADDLE_PFS_HOME/models/<job>/, else ./output/),
PADDLE_CHECKPOINT_DIR (else ./checkpoints/): trainer 0 saves the parameters there after every
pass, and a restarted job resumes from the latest complete checkpoint (checkpoint.py).

After every pass each trainer prints one machine-readable line for the job page:

    PADDLECLOUD_METRIC {"step": 3, "loss": 12.34}
"""

import json
import os
import sys

import checkpoint
import numpy as np
import paddle
from paddle.distributed import fleet

NUM_FEATURES = 13  # same shape as UCI housing
NUM_SAMPLES = 1024  # whole synthetic data set, split across trainers
BATCH_SIZE = 32
LEARNING_RATE = 0.01
SEED = 42


def check_env():
    """Refuse to start without a complete parameter-server cluster description.

    Without PADDLE_PSERVERS_IP_PORT_LIST PaddleCloudRoleMaker does not complain:
    it quietly falls back to single-process local training, so a misconfigured
    job would "succeed" without ever talking to a parameter server. POD_IP and
    PADDLE_PORT are read for trainers too (Paddle raises without them), although
    only a pserver binds that address.
    """
    required = [
        "TRAINING_ROLE",
        "PADDLE_PSERVERS_IP_PORT_LIST",
        "PADDLE_TRAINERS_NUM",
        "POD_IP",
        "PADDLE_PORT",
    ]
    role = os.environ.get("TRAINING_ROLE", "")
    if role == "TRAINER":
        required.append("PADDLE_TRAINER_ID")
    elif role and role != "PSERVER":
        sys.exit(f"fit_a_line: TRAINING_ROLE must be PSERVER or TRAINER, got {role!r}")
    missing = [name for name in required if not os.environ.get(name)]
    if missing:
        hint = ""
        if "PADDLE_PSERVERS_IP_PORT_LIST" in missing:
            hint = " (without a pserver list Paddle would silently train locally)"
        sys.exit(
            "fit_a_line: parameter-server mode needs these environment variables, "
            f"missing: {', '.join(missing)}{hint}"
        )


def make_data(trainer_id, trainers):
    """Synthetic UCI-housing-like data: 13 standardised features, linear target.

    Every trainer generates the same full data set from a fixed seed and keeps
    only the rows with index % trainers == trainer_id, so the shards are disjoint.
    """
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((NUM_SAMPLES, NUM_FEATURES)).astype("float32")
    true_w = rng.uniform(-4.0, 4.0, (NUM_FEATURES, 1)).astype("float32")
    noise = rng.normal(0.0, 2.0, (NUM_SAMPLES, 1)).astype("float32")
    y = x @ true_w + 22.5 + noise  # 22.5 ~ mean price in the real data set
    return x[trainer_id::trainers], y[trainer_id::trainers]


def write_multislot_file(path, x, y):
    """Write samples in the MultiSlot text format read by paddle.distributed datasets.

    One sample per line; for every slot (here x then y) its length followed by
    its values: "13 f1 ... f13 1 label".
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for features, label in zip(x, y, strict=True):
            values = " ".join(f"{v:.6f}" for v in features)
            f.write(f"{len(features)} {values} 1 {label[0]:.6f}\n")


def build_network():
    x = paddle.static.data(name="x", shape=[None, NUM_FEATURES], dtype="float32")
    y = paddle.static.data(name="y", shape=[None, 1], dtype="float32")
    pred = paddle.static.nn.fc(x, size=1)
    loss = paddle.mean(paddle.nn.functional.square_error_cost(pred, y))

    # exe.train_from_dataset() returns nothing, and the loss tensor lives in a
    # per-thread scope. Accumulate it into persistable (trainer-local, not
    # parameter-server) variables so the mean loss of a pass can be read back
    # from the global scope afterwards.
    loss_sum = paddle.static.create_global_var(
        [1], 0.0, "float32", persistable=True, name="pass_loss_sum"
    )
    batch_count = paddle.static.create_global_var(
        [1], 0.0, "float32", persistable=True, name="pass_batch_count"
    )
    paddle.assign(loss_sum + loss, loss_sum)
    paddle.assign(batch_count + 1.0, batch_count)
    return x, y, pred, loss


def read_and_reset_pass_loss(scope):
    place = paddle.CPUPlace()
    loss_sum = scope.find_var("pass_loss_sum").get_tensor()
    batch_count = scope.find_var("pass_batch_count").get_tensor()
    mean = float(np.array(loss_sum)[0] / max(np.array(batch_count)[0], 1.0))
    loss_sum.set(np.zeros([1], "float32"), place)
    batch_count.set(np.zeros([1], "float32"), place)
    return mean


def output_dir():
    job = os.environ.get("PADDLE_JOB_NAME") or "fit_a_line"
    pfs_home = os.environ.get("PADDLE_PFS_HOME")
    if pfs_home:
        return os.path.join(pfs_home, "models", job)
    return os.path.abspath("output")


def start_worker(trainer_id, ckpt):
    """fleet.init_worker(), with every trainer starting from the same parameters.

    Trainer 0 pushes its values to the pservers in init_worker(): the freshly initialised ones,
    then those of the latest checkpoint if there is one. The others wait until it has (see
    checkpoint.py), so none trains on parameters that the push would then throw away. A trainer
    0 that restarts while the pservers keep running (params-ready names them) pushes nothing:
    it pulls the live parameters like any other trainer, so nobody's progress is lost.
    """
    checkpoint.wait_for_pservers(os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(","))
    tokens = checkpoint.pserver_tokens(ckpt, fleet.server_num())
    if trainer_id != 0:
        checkpoint.wait_params_ready(ckpt, tokens)
        fleet.init_worker()  # pulls the parameters trainer 0 set
        return
    rejoining = checkpoint.params_ready(ckpt, tokens)
    if rejoining:
        # Paddle 2.6's init_worker() skips trainer 0's push when TEST_MODE=1 and only pulls.
        saved_mode = os.environ.get("TEST_MODE")
        os.environ["TEST_MODE"] = "1"
        fleet.init_worker()
        if saved_mode is None:
            del os.environ["TEST_MODE"]
        else:
            os.environ["TEST_MODE"] = saved_mode
    else:
        fleet.init_worker()
    saved = checkpoint.latest(ckpt)
    if saved and not rejoining:
        # Loads the saved dense parameters into the scope and pushes them to the pservers.
        fleet.load_inference_model(saved[1], mode=0)
        print(f"trainer 0 set the parameters of checkpoint pass {saved[0]}", flush=True)
    checkpoint.mark_params_ready(ckpt, tokens)


def run_trainer(x, y, pred):
    trainer_id = fleet.worker_index()
    trainers = fleet.worker_num()
    passes = int(os.environ.get("PADDLE_INIT_NUM_PASSES", "10"))
    ckpt = checkpoint.directory()
    done = checkpoint.progress(ckpt, trainer_id)
    if trainer_id == 0:
        checkpoint.remove_partial(ckpt)
    if done:
        print(f"trainer {trainer_id} resumes after pass {done} (checkpoints in {ckpt})", flush=True)

    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    start_worker(trainer_id, ckpt)

    data_file = os.path.abspath(os.path.join("data", f"train-{trainer_id:05d}.txt"))
    write_multislot_file(data_file, *make_data(trainer_id, trainers))

    dataset = paddle.distributed.InMemoryDataset()
    dataset.init(
        batch_size=BATCH_SIZE, thread_num=1, use_var=[x, y], pipe_command="cat"
    )
    dataset.set_filelist([data_file])
    dataset.load_into_memory()

    main_program = paddle.static.default_main_program()
    scope = paddle.static.global_scope()
    for step in range(done + 1, passes + 1):
        dataset.local_shuffle()
        exe.train_from_dataset(program=main_program, dataset=dataset)
        loss = read_and_reset_pass_loss(scope)
        print(f"trainer {trainer_id} pass {step} loss {loss:.4f}", flush=True)
        print(
            "PADDLECLOUD_METRIC " + json.dumps({"step": step, "loss": loss}), flush=True
        )
        if trainer_id == 0:
            # Pulls the pservers' current parameters, then writes them (dnn_plugin/).
            checkpoint.save_pass(
                ckpt,
                step,
                lambda tmp: fleet.save_inference_model(exe, tmp, [x.name], [pred]),
            )
        checkpoint.save_progress(ckpt, trainer_id, step)

    if trainer_id == 0:
        out = output_dir()
        # fleet.save_inference_model first pulls the latest dense parameters
        # from the pservers into the local scope (the local copy lags behind in
        # async mode), then writes the PS-format model to <out>/dnn_plugin/.
        fleet.save_inference_model(exe, out, [x.name], [pred])
        # With the fresh parameters now in the scope, also export a standard
        # inference model (inference.pdmodel / inference.pdiparams) that
        # paddle.static.load_inference_model can load without any pserver.
        infer_program = main_program.clone(for_test=True)
        paddle.static.save_inference_model(
            os.path.join(out, "inference"), [x], [pred], exe, program=infer_program
        )
        print(f"trainer 0 saved the model to {out}", flush=True)

    dataset.release_memory()
    fleet.stop_worker()


def main():
    check_env()
    paddle.enable_static()
    fleet.init(fleet.PaddleCloudRoleMaker())

    x, y, pred, loss = build_network()
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True  # async parameter-server training
    optimizer = fleet.distributed_optimizer(
        paddle.optimizer.SGD(learning_rate=LEARNING_RATE), strategy
    )
    optimizer.minimize(loss)

    if fleet.is_server():
        print(f"pserver {fleet.server_index()} starting", flush=True)
        checkpoint.announce_pserver(checkpoint.directory(), fleet.server_index())
        fleet.init_server()
        fleet.run_server()  # serves until the process is killed
    else:
        run_trainer(x, y, pred)


if __name__ == "__main__":
    main()
