"""Data helpers for training programs: split a data set into files, and let each trainer read
its share. Seed 004's `paddle.v2.dataset.common` functions (`split`, `convert`,
`cluster_files_reader`) and seed 002's `dist_reader`, working on Python 3. Standard library only.

A *reader* is a function returning an iterable of samples (PaddlePaddle's reader convention).
Trainer id and count default to the job's (see `paddlectl.runtime`), so inside a job

    train = dataset.cluster_files_reader("/pfs/dc/home/me/uci_housing/train-*.pickle")

gives every trainer a disjoint share of the files: sorted, file i goes to trainer
i % trainer_count.
"""

from __future__ import annotations

import glob
import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from . import recordio, runtime

Reader = Callable[[], Iterable[Any]]


def _identity(trainer_count: int | None, trainer_id: int | None) -> tuple[int, int]:
    count = runtime.trainer_count() if trainer_count is None else int(trainer_count)
    tid = runtime.trainer_id() if trainer_id is None else int(trainer_id)
    if count < 1:
        raise ValueError(f"trainer_count must be at least 1, got {count}")
    if not 0 <= tid < count:
        raise ValueError(f"trainer_id {tid} is out of range for {count} trainers")
    return count, tid


def shard_files(pattern: str, trainer_count: int | None = None, trainer_id: int | None = None) -> list[str]:
    """The files matching `pattern` (sorted) that belong to this trainer: index % count == id.
    /pfs paths of the user's home are mapped to where this process sees them."""
    count, tid = _identity(trainer_count, trainer_id)
    files = sorted(f for f in glob.glob(runtime.pfs_path(pattern)) if os.path.isfile(f))
    return [f for i, f in enumerate(files) if i % count == tid]


def cluster_files_reader(files_pattern: str, trainer_count: int | None = None, trainer_id: int | None = None,
                         loader: Callable[[IO[bytes]], Iterable[Any]] = pickle.load, **legacy: Any) -> Reader:
    """A reader over this trainer's share of the files written by `split()`.

    `loader(file)` loads one file and returns its samples (default `pickle.load`: `split()`
    pickles one list per file). Seed 004 spells `trainer_id` as `train_id`; both work."""
    if "train_id" in legacy:
        trainer_id = legacy.pop("train_id")
    if legacy:
        raise TypeError(f"unexpected arguments: {', '.join(legacy)}")

    def reader() -> Iterator[Any]:
        for path in shard_files(files_pattern, trainer_count, trainer_id):
            with open(path, "rb") as f:
                yield from loader(f)

    return reader


def _parse_cell(cell: str) -> Any:
    cell = cell.strip()
    try:
        return int(cell)
    except ValueError:
        try:
            return float(cell)
        except ValueError:
            return cell


def parse_csv_line(line: str) -> tuple[Any, ...]:
    return tuple(_parse_cell(cell) for cell in line.rstrip("\r\n").split(","))


def dist_reader(filename: str, trainers: int | None = None, trainer_id: int | None = None,
                parser: Callable[[str], Any] = parse_csv_line) -> Reader:
    """Seed 002's line sharding: this trainer reads line i of `filename` when
    i % trainers == trainer_id, each parsed by `parser` (comma-separated numbers by default)."""
    count, tid = _identity(trainers, trainer_id)

    def reader() -> Iterator[Any]:
        with open(runtime.pfs_path(filename)) as f:
            for i, line in enumerate(f):
                if i % count == tid and line.strip():
                    yield parser(line)

    return reader


def _chunks(reader: Reader, line_count: int) -> Iterator[list[Any]]:
    if not callable(reader):
        raise TypeError("reader must be a function returning an iterable (call it without ())")
    if line_count < 1:
        raise ValueError("line_count must be at least 1")
    batch: list[Any] = []
    for item in reader():
        batch.append(item)
        if len(batch) == line_count:
            yield batch
            batch = []
    if batch:
        yield batch


def split(reader: Reader, line_count: int, suffix: str = "./%05d.pickle",
          dumper: Callable[..., Any] = pickle.dump) -> list[str]:
    """Write the reader's samples into files of `line_count` samples each, named
    `suffix % index` (it must contain a %d-style placeholder, e.g. "./data/train-%05d.pickle").
    Each file holds one list, written by `dumper(obj, file)` (default `pickle.dump`; e.g.
    `marshal.dump`). Returns the file names."""
    try:
        suffix % 0
    except TypeError:
        raise ValueError(f"suffix must contain a placeholder for the file number, e.g. %05d: {suffix!r}") from None
    names = []
    for index, lines in enumerate(_chunks(reader, line_count)):
        name = suffix % index
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "wb") as f:
            dumper(lines, f)
        names.append(name)
    return names


def convert(output_path: str, reader: Reader, line_count: int, name_prefix: str,
            dumps: Callable[[Any], bytes] = pickle.dumps, compressor: int = recordio.SNAPPY) -> list[str]:
    """Write the reader's samples as RecordIO files of `line_count` records each, named
    `<output_path>/<name_prefix>-00000-of-00009` (each record is `dumps(sample)`, pickle by
    default). Returns the file names; read them back with `recordio_reader`."""
    os.makedirs(output_path, exist_ok=True)
    staged = []
    try:
        for index, lines in enumerate(_chunks(reader, line_count)):
            tmp = os.path.join(output_path, f".{name_prefix}-{index:05d}.tmp")
            staged.append(tmp)
            with recordio.Writer(tmp, compressor=compressor) as w:
                for line in lines:
                    w.write(dumps(line))
        total = len(staged)
        names = []
        for index, tmp in enumerate(staged):
            name = os.path.join(output_path, f"{name_prefix}-{index:05d}-of-{total:05d}")
            os.replace(tmp, name)
            names.append(name)
        return names
    except BaseException:
        for tmp in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise


def recordio_reader(files_pattern: str, trainer_count: int | None = None, trainer_id: int | None = None,
                    loads: Callable[[bytes], Any] = pickle.loads) -> Reader:
    """Seed 004's recordio_reader: this trainer's share of the RecordIO files matching the
    pattern, every record decoded with `loads` (pickle by default)."""

    def reader() -> Iterator[Any]:
        files = shard_files(files_pattern, trainer_count, trainer_id)
        with recordio.Reader(files) as r:
            for record in r:
                yield loads(record)

    return reader
