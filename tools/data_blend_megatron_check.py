#!/usr/bin/env python3
"""Checks troupe's blend order (data.blend) against megatron-core's own code: for
several blends, the dataset of each of the first N positions of troupe's train order
(`supervisor plan --megatron-args F --blend-order N`, the blend imported from Megatron's
own --data-path words) must equal megatron-core's choice for it.

megatron-core's side, as its BlendedMegatronDatasetBuilder and BlendedDataset run it
(megatron/core/datasets/blended_megatron_dataset_builder.py, blended_dataset.py):
  1. the --data-path words parsed by megatron.core.datasets.utils.get_blend_from_list;
  2. the weights normalized by utils.normalize in the builder, and again by
     BlendedDataset.__init__ (size given);
  3. the indices built by the compiled helpers_cpp.build_blending_indices.
Importing BlendedDataset itself needs torch (megatron-core's `megatron/core/__init__.py`
imports it); this script loads the datasets package's utils module and the compiled
helpers without running those __init__ files, so torch is not needed.

Sets up its own virtual environment (build/megatron-venv: `pip install --no-deps
megatron-core numpy`) when megatron-core's datasets helpers are not importable; exits 77
(skipped) with the reason when that fails.

Usage: data_blend_megatron_check.py SUPERVISOR [N]
Prints one line per blend and exits 0 when every choice agrees, 1 otherwise.
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, "build", "megatron-venv")

# Blends as a Megatron user writes them (--data-path words).
BLENDS = [
    "0.3 web 0.5 code 0.2 books",
    "1 a 1 b",
    "70 a 0.001 b 30 c",
    "0.25 a 0.25 b 0.5 c",
    "2 a 3 b 5 c 7 d 11 e 13 f 17 g 19 h 23 i 29 j",
    "1e-3 a 0.999 b",
]


def datasets_dir():
    """megatron/core/datasets of an installed megatron-core, or None."""
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        d = os.path.join(base, "core", "datasets")
        if os.path.isdir(d) and any(f.startswith("helpers_cpp") for f in os.listdir(d)):
            return d
    return None


def ensure_megatron():
    try:
        import numpy  # noqa: F401
        if datasets_dir():
            return
    except ImportError:
        pass
    if os.environ.get("TROUPE_MEGATRON_VENV_ACTIVE"):
        print("SKIP: megatron-core's dataset helpers are not importable even in " + VENV, file=sys.stderr)
        sys.exit(77)
    py = os.path.join(VENV, "bin", "python")
    try:
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--retries", "1", "--timeout", "30", "--no-deps",
                        "megatron-core", "numpy"], check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        print("SKIP: cannot set up " + VENV + " with megatron-core and numpy: " + str(e), file=sys.stderr)
        sys.exit(77)
    env = dict(os.environ, TROUPE_MEGATRON_VENV_ACTIVE="1")
    os.execve(py, [py] + sys.argv, env)


def load_megatron():
    """megatron-core's datasets utils module and compiled helpers, without torch."""
    d = datasets_dir()
    core = os.path.dirname(d)
    # Package shells with the real search paths, so that relative imports resolve
    # without running megatron/__init__.py and megatron/core/__init__.py (torch).
    for name, path in (("megatron", os.path.dirname(core)), ("megatron.core", core), ("megatron.core.datasets", d)):
        m = types.ModuleType(name)
        m.__path__ = [path]
        sys.modules[name] = m
    # utils.py imports log_single_rank from megatron.core.utils, which needs torch; the
    # functions used here only log through it.
    stub = types.ModuleType("megatron.core.utils")
    stub.log_single_rank = lambda *a, **k: None
    sys.modules["megatron.core.utils"] = stub
    import megatron.core.datasets.utils as utils
    so = [f for f in os.listdir(d) if f.startswith("helpers_cpp")][0]
    spec = importlib.util.spec_from_file_location("megatron.core.datasets.helpers_cpp", os.path.join(d, so))
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    return utils, helpers


def megatron_choices(utils, helpers, words, n):
    import numpy
    prefixes, weights = utils.get_blend_from_list(words.split())
    weights = utils.normalize(weights)  # the builder
    weights = utils.normalize(weights)  # BlendedDataset.__init__, size given
    dataset_index = numpy.zeros(n, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(n, dtype=numpy.int64)
    helpers.build_blending_indices(dataset_index, dataset_sample_index, numpy.array(weights, dtype=numpy.float64),
                                   len(prefixes), n, False)
    return [int(x) for x in dataset_index], [int(x) for x in dataset_sample_index]


def troupe_choices(supervisor, words, n):
    with tempfile.TemporaryDirectory() as tmp:
        args = os.path.join(tmp, "data.args")
        with open(args, "w") as f:
            f.write("--data-path " + words + "\n")
        out = subprocess.run([supervisor, "plan", "--megatron-args", args, "--blend-order", str(n)],
                             check=True, capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        sys.exit(2)
    supervisor = os.path.abspath(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) == 3 else 100000
    ensure_megatron()
    utils, helpers = load_megatron()
    failed = 0
    for words in BLENDS:
        ours = troupe_choices(supervisor, words, n)
        theirs, sample_index = megatron_choices(utils, helpers, words, n)
        # troupe's place inside each dataset is the count of its earlier choices, as
        # Megatron's dataset_sample_index.
        taken, same_index = {}, True
        for d, k in zip(ours, sample_index):
            same_index = same_index and taken.get(d, 0) == k
            taken[d] = taken.get(d, 0) + 1
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        if len(ours) != n or first is not None or not same_index:
            failed += 1
            print("FAIL %-50s first difference at position %s (troupe %s, megatron-core %s)" %
                  (words, first, ours[first] if first is not None else "-",
                   theirs[first] if first is not None else "-"))
        else:
            print("ok   %-50s %d positions, every dataset choice and place equal" % (words, n))
    print("%d of %d blends agree with megatron-core" % (len(BLENDS) - failed, len(BLENDS)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
