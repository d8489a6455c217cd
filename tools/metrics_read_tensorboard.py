#!/usr/bin/env python3
"""Reads TensorBoard event files with TensorBoard's own reader and prints the scalars.

Usage: metrics_read_tensorboard.py PATH
  PATH is an event file or a directory of them (a run directory's events/).

Prints one JSON object on stdout:
  {"file_version": 2.0, "scalars": {"loss": [[step, value, wall_time], ...], ...}}
in step order, as TensorBoard would plot them (after its purge of steps orphaned by
a restart). Non-finite values are printed as the strings "nan", "inf", "-inf".

This is a test client for troupe's event-file writer (test/metrics): it uses
tensorboard.backend.event_processing.event_accumulator, code troupe did not write.
Exit status: 0 on success, 77 (the conventional "skipped") when the tensorboard
package cannot be imported, 1 on any other failure.
"""

import json
import math
import os
import sys


def number(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 1
    path = argv[1]
    if not os.path.exists(path):
        print(f"{path}: no such file or directory", file=sys.stderr)
        return 1
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except Exception as e:  # ImportError, or a broken install
        print(f"SKIP: the tensorboard package is not importable ({e}); "
              f"install it with `pip install tensorboard`", file=sys.stderr)
        return 77

    # size_guidance 0 keeps every scalar (the default samples down to 10,000 per tag).
    acc = event_accumulator.EventAccumulator(
        path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    scalars = {}
    for tag in sorted(acc.Tags()[event_accumulator.SCALARS]):
        scalars[tag] = [[e.step, number(e.value), e.wall_time] for e in acc.Scalars(tag)]
    json.dump({"file_version": acc.file_version, "scalars": scalars}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
