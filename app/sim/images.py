"""The simulator's image catalogue: what a campaign's image carries, and whether it pulls. A
scenario's `[[image]]` tables come first; an image nothing matches has python3 and torch."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class ImageSpec:
    name: str  # a glob on the image reference, e.g. "ghcr.io/nvidia/jax:*"
    python: bool = True
    torch: bool = True
    cuda: str | None = None  # None: read from the tag where it says (cuda12.4, 12.4.1-...)
    pullable: bool = True


# What these images ship, from their own registries' descriptions: the pytorch images carry
# python3 and torch; NVIDIA's CUDA base images have neither python3 nor torch; the JAX and
# TensorFlow images carry python3 without torch; distribution bases have no python3.
DEFAULT_IMAGES: tuple[ImageSpec, ...] = (
    ImageSpec("pytorch/pytorch:*"),
    ImageSpec("nvcr.io/nvidia/pytorch:*"),
    ImageSpec("vastai/pytorch*"),
    ImageSpec("ghcr.io/nvidia/jax:*", python=True, torch=False),
    ImageSpec("nvcr.io/nvidia/jax:*", python=True, torch=False),
    ImageSpec("tensorflow/tensorflow:*", python=True, torch=False),
    ImageSpec("nvcr.io/nvidia/tensorflow:*", python=True, torch=False),
    ImageSpec("vastai/base-image:*", python=True, torch=False),
    ImageSpec("python:*", python=True, torch=False),
    ImageSpec("nvidia/cuda:*", python=False, torch=False),
    ImageSpec("nvcr.io/nvidia/cuda:*", python=False, torch=False),
    ImageSpec("ubuntu:*", python=False, torch=False),
    ImageSpec("debian:*", python=False, torch=False),
)
CUSTOM = ImageSpec("*")

_CUDA_IN_TAG = re.compile(r"cuda[-_]?(\d+\.\d+)")  # pytorch/pytorch:2.4.0-cuda12.4-...
_CUDA_BASE_TAG = re.compile(r"cuda:(\d+\.\d+)(\.\d+)?-")  # nvidia/cuda:12.4.1-runtime-...


def image_facts(image: str, catalogue: tuple[ImageSpec, ...] = ()) -> ImageSpec:
    """What `image` carries: the first scenario entry whose glob matches, then the defaults,
    then a custom image with python3 and torch. `cuda` filled from the tag when unset."""
    spec = next(
        (s for s in (*catalogue, *DEFAULT_IMAGES) if fnmatchcase(image, s.name)),
        CUSTOM,
    )
    if spec.cuda is None:
        m = _CUDA_IN_TAG.search(image) or _CUDA_BASE_TAG.search(image)
        if m:
            spec = replace(spec, cuda=m.group(1))
    return spec
