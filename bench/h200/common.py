"""What the H200 scripts share: the C API binding, the device's
description for their JSON, and timing a launch with CUDA events."""

import importlib.util
import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_package_file(name):
    """python/fa4/<name>.py as a module of its own: the fa4 package around
    it needs its native extension, which is not built for this Python."""
    spec = importlib.util.spec_from_file_location(
        "fa4" + name, os.path.join(ROOT, "python", "fa4", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_builds(parser, items):
    """LABEL=DIR arguments, two or more, each DIR a directory: [(label,
    dir)] in order (the first the baseline); a bad one is the parser's
    error."""
    builds = []
    for item in items:
        label, _, directory = item.partition("=")
        if not directory or not os.path.isdir(directory):
            parser.error(f"{item!r} is not LABEL=DIR with DIR a directory")
        if label in dict(builds):
            parser.error(f"label {label!r} names two builds")
        builds.append((label, directory))
    if len(builds) < 2:
        parser.error("name two or more LABEL=DIR builds")
    return builds


def load_capi():
    """python/fa4/_capi.py (load_package_file)."""
    return load_package_file("_capi")


def device_info(device):
    """torch, CUDA and Python versions, and for a GPU its name, SM count,
    compute capability and driver."""
    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "python": sys.version.split()[0]}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, sm_count=props.multi_processor_count,
                    capability=f"{props.major}.{props.minor}")
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version",
                 "--format=csv,noheader"],
                capture_output=True, text=True, check=True).stdout.split()[0]
        except (OSError, subprocess.CalledProcessError, IndexError):
            info["driver"] = None
    return info


def event_times(launch, count, warmup=0):
    """Milliseconds of each of `count` calls of `launch` (after `warmup`
    untimed ones), each between two CUDA events and waited for."""
    for _ in range(warmup):
        launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(count):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times
