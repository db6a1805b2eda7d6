"""A GPU's profile, wherever it comes from, and what it says about one replica.

A `GPUProfile` is everything the latency model knows about a GPU: its device facts, the
operator tables measured on it (one per profiled model shape), an attention fit and the
all-reduce times among its GPUs, each with a line saying where it comes from. Built-in GPUs
are read from `data/` (`builtin_profile`); a directory in Vidur's layout is read by
`vidur.py`; `store.py` keeps imported ones.

`replica_ops` picks the operator curves of one model at one TP degree: the measured table
when the GPU was profiled with the model's shape, else the nearest profiled model's table
scaled by a roofline fitted to the GPU's profile (`roofline.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt

from slidingserve.sim.hardware.catalog import (
    AttentionFit,
    DeviceSpec,
    LinkModel,
    load_gpu,
    load_table,
)
from slidingserve.sim.hardware.models import ModelSpec
from slidingserve.sim.hardware.optables import OpShape, OpTable
from slidingserve.sim.hardware.roofline import LayerDims, Roofline, nearest_table, scale_grid
from slidingserve.sim.hardware.tables import Curve

FloatArray = npt.NDArray[np.float64]
_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class AllReduce:
    """All-reduce time by message size: measured curves per GPU count, else a link model."""

    measured: Mapping[int, tuple[tuple[int, ...], tuple[float, ...]]]  # GPUs → (bytes, ms)
    link: LinkModel | None
    source: str

    def workers(self) -> tuple[int, ...]:
        """GPU counts with an all-reduce time."""
        if self.measured:
            return tuple(sorted(self.measured))
        if self.link is None:
            return ()
        return tuple(n for n in (2, 4, 8) if n <= self.link.max_workers)

    def ms(self, message_bytes: FloatArray, workers: int) -> FloatArray:
        if workers not in self.workers():
            raise ValueError(
                f"no all-reduce time for {workers} GPUs ({self.source}); "
                f"known for {list(self.workers())}"
            )
        if self.measured:
            sizes, times = self.measured[workers]
            return Curve.fit(sizes, times)(message_bytes)
        assert self.link is not None  # workers() is empty without one
        return np.asarray(self.link.all_reduce_ms(message_bytes, workers), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class GPUProfile:
    """What the simulator knows about one GPU, and where each part comes from."""

    name: str
    device: DeviceSpec
    activation_reserve_gib: float
    cpu_overhead_s: float
    tables: tuple[OpTable, ...]
    attention: AttentionFit
    attention_source: str
    all_reduce: AllReduce
    origin: str  # "built in", or the directory it was imported from
    roofline: Roofline  # fitted to every table: scales other models' operators

    @property
    def memory_bytes(self) -> float:
        return self.device.memory_gib * _GIB

    @property
    def activation_reserve_bytes(self) -> float:
        return self.activation_reserve_gib * _GIB

    def describe(self) -> str:
        shapes = "; ".join(table.label for table in self.tables)
        return (
            f"{self.name} ({self.device.description}, {self.origin}): "
            f"operators measured for {shapes}"
        )


@dataclass(frozen=True, slots=True)
class ReplicaOps:
    """Operator curves of one model at one TP degree, and where they come from."""

    layer_ms: Curve  # ms per layer: every op except the attention kernel
    emb_ms: Curve  # ms per batch
    source: str
    measured_tps: tuple[int, ...]  # TP degrees the underlying table holds


def shape_of(model: ModelSpec) -> OpShape:
    return OpShape(
        model.num_heads,
        model.num_kv_heads,
        model.hidden_size,
        model.intermediate_size,
        model.vocab_size,
    )


def dims_of(model: ModelSpec) -> LayerDims:
    return LayerDims(
        model.hidden_size,
        model.num_heads * model.head_dim,
        model.num_kv_heads * model.head_dim,
        model.intermediate_size,
    )


def measured_table(profile: GPUProfile, model: ModelSpec) -> OpTable | None:
    """The table measured with `model`'s layer shapes, if the GPU has one."""
    shape = shape_of(model)
    if model.head_dim * model.num_heads != model.hidden_size:
        return None  # Vidur's tables imply head_dim = hidden / heads
    return next((t for t in profile.tables if t.shape.same_layers(shape)), None)


def source_table(profile: GPUProfile, model: ModelSpec) -> OpTable:
    """The table `model`'s operator times come from: measured, else the nearest to scale."""
    return measured_table(profile, model) or nearest_table(profile.tables, dims_of(model))


def replica_ops(profile: GPUProfile, model: ModelSpec, tp: int) -> ReplicaOps:
    """`model`'s operator curves on `profile` at TP `tp` (measured or scaled)."""
    table = source_table(profile, model)
    grid = table.grid(tp)
    if measured_table(profile, model) is not None:
        source = f"operators measured ({table.label})"
    else:
        grid = scale_grid(
            grid, tp, LayerDims.of_shape(table.shape), dims_of(model), profile.roofline
        )
        source = f"operators scaled from {table.label} by a {profile.roofline.describe()}"
    tokens = grid.num_tokens
    return ReplicaOps(
        Curve.fit(tokens, grid.layer_ms),
        Curve.fit(tokens, grid.emb_ms),
        source,
        tuple(sorted(table.per_tp)),
    )


def available_tp(profile: GPUProfile, model: ModelSpec) -> tuple[int, ...]:
    """TP degrees that split `model`'s heads evenly and have operator times and, beyond 1,
    an all-reduce time."""
    table_tps = source_table(profile, model).per_tp
    workers = set(profile.all_reduce.workers())
    return tuple(
        sorted(
            tp
            for tp in table_tps
            if (tp == 1 or tp in workers)
            and model.num_heads % tp == 0
            and model.num_kv_heads % tp == 0
        )
    )


def provenance(profile: GPUProfile, model: ModelSpec, tp: int) -> tuple[str, ...]:
    """Where each part of the replica's latency model comes from, one line each."""
    model_source = f"model {model.name}" + (f" ({model.hf_name})" if model.hf_name else "")
    lines = [
        f"GPU {profile.name}: {profile.device.description}, {profile.origin}",
        model_source,
        replica_ops(profile, model, tp).source,
        f"attention {profile.attention_source}",
    ]
    if tp > 1:
        lines.append(f"all-reduce {profile.all_reduce.source}")
    return tuple(lines)


@cache
def builtin_profile(name: str) -> GPUProfile:
    """The built-in GPU `name` (data/catalog.toml and its tables)."""
    gpu = load_gpu(name)
    tables = tuple(OpTable.from_json(load_table(file)) for file in gpu.op_tables)
    if gpu.attention is not None:
        attention, attention_source = gpu.attention, "fitted to measured rows"
    else:
        attention, attention_source = derived_attention(gpu.device, gpu.attention_from)
    return GPUProfile(
        name=name,
        device=gpu.device,
        activation_reserve_gib=gpu.activation_reserve_gib,
        cpu_overhead_s=gpu.cpu_overhead_s,
        tables=tables,
        attention=attention,
        attention_source=attention_source,
        all_reduce=_builtin_all_reduce(gpu.all_reduce_table, gpu.link),
        origin="built in",
        roofline=Roofline.fit(tables),
    )


def derived_attention(device: DeviceSpec, reference_gpu: str) -> tuple[AttentionFit, str]:
    """`reference_gpu`'s attention fit on `device`: prefill by compute, decode by bandwidth."""
    reference = builtin_profile(reference_gpu)
    compute = device.peak_tflops / reference.device.peak_tflops
    bandwidth = device.memory_bandwidth_gbs / reference.device.memory_bandwidth_gbs
    fit = reference.attention.on_slower_device(compute, bandwidth)
    source = (
        f"derived: {reference_gpu}'s fit, prefill ÷ {compute:.2f} (peak compute), "
        f"decode ÷ {bandwidth:.2f} (memory bandwidth)"
    )
    return fit, source


def all_reduce_from_table(doc: Mapping[str, Mapping[str, list[float]]], source: str) -> AllReduce:
    """Measured all-reduce curves from `{workers: {size_bytes: [...], ms: [...]}}`."""
    points = {
        int(workers): (tuple(int(s) for s in table["size_bytes"]), tuple(table["ms"]))
        for workers, table in doc.items()
    }
    return AllReduce(points, None, source)


def all_reduce_from_link(link: LinkModel) -> AllReduce:
    return AllReduce({}, link, f"modelled: {link.describe()}")


def _builtin_all_reduce(table: str, link: LinkModel | None) -> AllReduce:
    if table:
        return all_reduce_from_table(load_table(table)["num_workers"], f"measured ({table})")
    if link is not None:
        return all_reduce_from_link(link)
    return AllReduce({}, None, "none: single GPU only")
