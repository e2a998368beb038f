"""fit_a_line's checkpoints and start barrier, kept as files in $PADDLE_CHECKPOINT_DIR.

The directory is shared by every replica of the job (PaddleCloud puts it in the user's home,
which all replicas see at the same path) and outlives the processes, so it holds:

    pass-000012/             trainer 0's parameters after its pass 12 (complete: see save_pass)
    trainer-<id>.progress    the passes trainer <id> has completed, for its restart
    pserver-<index>.token    a fresh token per start of each pserver
    params-ready             the pserver tokens for which trainer 0 has set the parameters

In async parameter-server mode the parameters live on the pservers: a trainer only holds a
copy it pulls. Trainer 0 pushes its initial (or checkpointed) values to them in
fleet.init_worker(); a trainer that trained before that push would lose its progress to it.
Without gloo Paddle's own barrier there is a no-op, so trainers wait for `params-ready` naming
the tokens of the pservers running now: tokens of earlier pserver processes (a previous run or
attempt of the job) never match.
"""

import json
import os
import shutil
import socket
import time
import uuid

KEEP = 2  # complete checkpoints kept; older ones are removed
PREFIX = "pass-"
TMP_PREFIX = ".tmp-"
POLL_SECONDS = 0.2


def directory():
    """$PADDLE_CHECKPOINT_DIR, else ./checkpoints (a run by hand with every process in one directory)."""
    path = os.environ.get("PADDLE_CHECKPOINT_DIR") or os.path.abspath("checkpoints")
    os.makedirs(path, exist_ok=True)
    return path


def _write_file(path, text):
    """Replace `path` atomically: a reader sees the old content or the new, never a part."""
    tmp = f"{path}{TMP_PREFIX}{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_file(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


# --- checkpoints -----------------------------------------------------------------------------
def _fsync_tree(top):
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def save_pass(root, step, write):
    """Write checkpoint `step` with `write(tmp_dir)`, then rename it into place: the rename is
    atomic, so a process killed mid-save leaves only a .tmp- directory that latest() ignores."""
    final = os.path.join(root, f"{PREFIX}{step:06d}")
    tmp = os.path.join(root, f"{TMP_PREFIX}{PREFIX}{step:06d}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    write(tmp)
    _write_file(os.path.join(tmp, "meta.json"), json.dumps({"pass": step}))
    _fsync_tree(tmp)
    if os.path.exists(final):  # the same pass again after a restart: the older copy gives way
        old = f"{tmp}-old"
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    for _step, path in _complete(root)[:-KEEP]:
        shutil.rmtree(path, ignore_errors=True)
    return final


def _complete(root):
    """(pass, path) of every complete checkpoint, oldest first."""
    found = []
    for name in os.listdir(root):
        digits = name[len(PREFIX):]
        if name.startswith(PREFIX) and digits.isdigit():
            path = os.path.join(root, name)
            if os.path.exists(os.path.join(path, "meta.json")):
                found.append((int(digits), path))
    return sorted(found)


def latest(root):
    """(pass, path) of the newest complete checkpoint, or None."""
    found = _complete(root)
    return found[-1] if found else None


def remove_partial(root):
    """Drop what saves killed half-way left behind (only trainer 0 saves, so only it calls this)."""
    for name in os.listdir(root):
        if name.startswith(TMP_PREFIX + PREFIX):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def save_progress(root, trainer_id, step):
    _write_file(os.path.join(root, f"trainer-{trainer_id}.progress"), f"{step}\n")


def progress(root, trainer_id):
    """Passes this trainer completed in earlier runs of the job (0 if none)."""
    text = _read_file(os.path.join(root, f"trainer-{trainer_id}.progress"))
    return int(text) if text and text.strip().isdigit() else 0


# --- start barrier ---------------------------------------------------------------------------
def announce_pserver(root, index):
    """Called by a pserver before it starts serving, so once its port answers the token is its own."""
    _write_file(os.path.join(root, f"pserver-{index}.token"), uuid.uuid4().hex)


def wait_for_pservers(endpoints):
    """Block until every pserver accepts connections (Paddle retries forever as well)."""
    said = False
    for endpoint in endpoints:
        host, port = endpoint.rsplit(":", 1)
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
                break
            except OSError:
                if not said:
                    print(f"waiting for pserver {endpoint}", flush=True)
                    said = True
                time.sleep(POLL_SECONDS)


def pserver_tokens(root, count):
    """The tokens of the running pservers; call after wait_for_pservers."""
    tokens = [_read_file(os.path.join(root, f"pserver-{i}.token")) for i in range(count)]
    if None in tokens:
        raise SystemExit("fit_a_line: a pserver answers but wrote no token in the checkpoint directory")
    return tokens


def params_ready(root, tokens):
    """Whether trainer 0 has set the parameters on exactly these pservers."""
    text = _read_file(os.path.join(root, "params-ready"))
    return text is not None and json.loads(text) == tokens


def mark_params_ready(root, tokens):
    _write_file(os.path.join(root, "params-ready"), json.dumps(tokens))


def wait_params_ready(root, tokens):
    if not params_ready(root, tokens):
        print("waiting for trainer 0 to set the initial parameters", flush=True)
    while not params_ready(root, tokens):
        time.sleep(POLL_SECONDS)
