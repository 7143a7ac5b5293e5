"""Helpers the paper notebooks share: find the pipescope binary, run it, read its output into pandas.

Environment:
  PIPESCOPE_BIN       the pipescope executable (default: build/pipescope of this checkout, then `pipescope` on PATH)
  PIPESCOPE_NB_OUT    where the figures (PNG, SVG) go (default: build/notebook-figures, so that running a
                      notebook never overwrites the committed notebooks/figures; set it to notebooks/figures
                      to refresh those, after a full run)
  PIPESCOPE_NB_FULL   1 = every configuration of the paper; unset = the subset that keeps a notebook to a few
                      seconds of simulation (what the ctest runs)
"""

import io
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd

NOTEBOOKS = Path(__file__).resolve().parent
REPO = NOTEBOOKS.parent
SCENARIOS = REPO / "scenarios"
DEFAULT_OUT = REPO / "build" / "notebook-figures"  # not notebooks/figures: those are committed
FULL = os.environ.get("PIPESCOPE_NB_FULL", "") not in ("", "0")


def binary():
    """The pipescope executable: $PIPESCOPE_BIN, build/pipescope, or pipescope on PATH."""
    env = os.environ.get("PIPESCOPE_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise FileNotFoundError(f"PIPESCOPE_BIN={env} is not an executable")
        return env
    local = REPO / "build" / "pipescope"
    if os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("pipescope")
    if found:
        return found
    raise FileNotFoundError("pipescope not found: build it (cmake --build --preset release) or set PIPESCOPE_BIN")


def out_dir():
    d = Path(os.environ.get("PIPESCOPE_NB_OUT", DEFAULT_OUT))
    d.mkdir(parents=True, exist_ok=True)
    return d


def run(*args):
    """Runs `pipescope ARGS`; returns stdout. Raises with pipescope's stderr on a non-zero exit."""
    cmd = [binary(), *map(str, args)]
    t0 = time.time()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    print(f"[{time.time() - t0:5.1f} s] pipescope {' '.join(map(str, args))}")
    return p.stdout


def simulate(scenario):
    """`pipescope simulate SCENARIO --json`: the report as a dict (iteration_s, tflops_per_gpu, memory, ...)."""
    with tempfile.TemporaryDirectory(prefix="pipescope-nb-") as tmp:
        path = Path(tmp) / "report.json"
        run("simulate", scenario, "--json", path)
        with open(path) as f:
            return json.load(f)


def sweep(scenario, **vary):
    """`pipescope sweep SCENARIO --vary key=v1,v2 ...` as a DataFrame (one row per run).

    Keys are scenario paths with '__' for '.': sweep(f, schedule__seq_slices=[1, 4]).
    """
    args = ["sweep", scenario]
    for key, values in vary.items():
        values = values if isinstance(values, (list, tuple)) else [values]
        args += ["--vary", key.replace("__", ".") + "=" + ",".join(map(str, values))]
    return pd.read_csv(io.StringIO(run(*args)), keep_default_na=False, na_values=[""])


def peak_memory_GB(report):
    """Peak memory per pipeline rank (GB) from a simulate --json report."""
    return [r["peak_bytes"] / 1e9 for r in report["memory"]["ranks"]]


def save(fig, name):
    """Saves a matplotlib figure as PNG under out_dir()."""
    path = out_dir() / f"{name}.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    print(f"wrote {path}")
