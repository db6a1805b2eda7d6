"""Imported GPU profiles, kept between runs (`slidingserve import-profile`).

Each imported GPU is one JSON file, `<name>.json`, in the store: `$SLIDINGSERVE_PROFILES`
when set, else `~/.local/share/slidingserve/profiles`. It holds the derived tables, not the
raw CSVs: device facts, operator tables, the attention fit and the all-reduce times, each
with the line that says where it comes from.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from slidingserve.sim.hardware.catalog import AttentionFit, DeviceSpec, LinkModel
from slidingserve.sim.hardware.optables import OpTable
from slidingserve.sim.hardware.profiles import AllReduce, GPUProfile
from slidingserve.sim.hardware.roofline import Roofline

STORE_ENV = "SLIDINGSERVE_PROFILES"
FORMAT = 1


def store_dir() -> Path:
    configured = os.environ.get(STORE_ENV)
    if configured:
        return Path(configured)
    return Path.home() / ".local" / "share" / "slidingserve" / "profiles"


def stored_gpus() -> list[str]:
    """Names of the imported GPUs, sorted."""
    folder = store_dir()
    return sorted(path.stem for path in folder.glob("*.json")) if folder.is_dir() else []


def save_profile(profile: GPUProfile) -> Path:
    """Write `profile` into the store; returns the file written."""
    folder = store_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{profile.name}.json"
    path.write_text(json.dumps(profile_to_json(profile)) + "\n", encoding="utf-8")
    return path


def stored_profile(name: str) -> GPUProfile:
    path = store_dir() / f"{name}.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return profile_from_json(doc)
    except (OSError, AttributeError, KeyError, TypeError, ValueError) as error:
        # ValueError covers bad JSON; the others, JSON of the wrong shape (a list for a dict).
        raise ValueError(f"{path}: not a readable imported profile ({error})") from None


def profile_to_json(profile: GPUProfile) -> dict[str, Any]:
    all_reduce = profile.all_reduce
    return {
        "format": FORMAT,
        "name": profile.name,
        "origin": profile.origin,
        "device": asdict(profile.device),
        "activation_reserve_gib": profile.activation_reserve_gib,
        "cpu_overhead_s": profile.cpu_overhead_s,
        "tables": [table.to_json() for table in profile.tables],
        "attention": asdict(profile.attention),
        "attention_source": profile.attention_source,
        "all_reduce": {
            "source": all_reduce.source,
            "measured": {
                str(workers): {"size_bytes": list(sizes), "ms": list(times)}
                for workers, (sizes, times) in all_reduce.measured.items()
            },
            "link": asdict(all_reduce.link) if all_reduce.link else None,
        },
    }


def profile_from_json(doc: dict[str, Any]) -> GPUProfile:
    if doc.get("format") != FORMAT:
        raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT}")
    tables = tuple(OpTable.from_json(table) for table in doc["tables"])
    reduce_doc = doc["all_reduce"]
    measured = {
        int(workers): (tuple(points["size_bytes"]), tuple(points["ms"]))
        for workers, points in reduce_doc["measured"].items()
    }
    link = LinkModel(**reduce_doc["link"]) if reduce_doc["link"] else None
    return GPUProfile(
        name=doc["name"],
        device=DeviceSpec(**doc["device"]),
        activation_reserve_gib=float(doc["activation_reserve_gib"]),
        cpu_overhead_s=float(doc["cpu_overhead_s"]),
        tables=tables,
        attention=AttentionFit(**doc["attention"]),
        attention_source=doc["attention_source"],
        all_reduce=AllReduce(measured, link, reduce_doc["source"]),
        origin=doc["origin"],
        roofline=Roofline.fit(tables),
    )
