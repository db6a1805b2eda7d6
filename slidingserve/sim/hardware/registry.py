"""Which GPU profile a name means: a `--profile-dir` directory's, then built in, then imported.

A directory given with `--profile-dir` (Vidur's layout) is read as it is and its GPUs win over
built-in ones of the same name, because the user pointed at it. `slidingserve import-profile`
saves a directory's GPUs in the store (`store.py`), where later runs find them by name.
"""

from __future__ import annotations

from functools import lru_cache

from slidingserve.sim.hardware.catalog import list_gpus
from slidingserve.sim.hardware.profiles import GPUProfile, builtin_profile
from slidingserve.sim.hardware.store import stored_gpus, stored_profile
from slidingserve.sim.hardware.vidur import read_vidur_dir


def gpu_profile(name: str, profile_dir: str = "") -> GPUProfile:
    """The profile of GPU `name`; ValueError naming every known GPU if there is none."""
    if profile_dir:
        imported = _directory(profile_dir)
        if name in imported:
            return imported[name]
    if name in list_gpus():
        return builtin_profile(name)
    if name in stored_gpus():
        return stored_profile(name)
    known = known_gpus(profile_dir)
    raise ValueError(f"unknown gpu {name!r}; known: {known}")


def known_gpus(profile_dir: str = "") -> list[str]:
    """Every GPU name `gpu_profile` resolves, sorted."""
    names = set(list_gpus()) | set(stored_gpus())
    if profile_dir:
        names |= set(_directory(profile_dir))
    return sorted(names)


@lru_cache(maxsize=8)
def _directory(profile_dir: str) -> dict[str, GPUProfile]:
    return {profile.name: profile for profile in read_vidur_dir(profile_dir)}
