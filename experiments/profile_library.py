"""Regenerate the profile library (``cassini/data/profiles.json``) from measurements:
each real model alone on the testbed (its ideal run), its profile from the DDP comm hook
(one phase per gradient bucket's all-reduce), rates expressed at the real NIC rate the
emulated link stands for (x ``nic_bps`` / bottleneck), every entry with its provenance
(calibration file and its provenance, ``nic_bps``, ``scale``, measured iteration time,
the command).  Entries for models the testbed cannot run (the paper's others) stay,
labelled ``assumed``.

    sudo .venv/bin/python -m experiments.profile_library            # write the library
    sudo .venv/bin/python -m experiments.profile_library --dry-run  # print it only
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from cassini.outputs import json_text
from experiments.common import BOTTLENECK_BPS, dumbbell, progress, run_config
from experiments.harness import Experiment, Run, at_least, iterations, option

#: library id -> testbed model name
MEASURED = {
    "resnet50": "resnet50",
    "vgg16": "vgg16",
    "vgg11": "vgg11",
    "wideresnet101": "wide_resnet101",
    "bert": "bert_base",
    "gpt2": "gpt2",
}
NIC_BPS = 50e9  # the CASSINI testbed's NICs
LIBRARY = Path(str(resources.files("cassini").joinpath("data/profiles.json")))


def measure_entry(lib_id: str, model: str, iterations: int, out: Path) -> dict[str, Any]:
    cfg = {
        "topology": dumbbell(1, "fair"),
        "jobs": [
            {"id": lib_id, "kind": "model", "model": model, "hosts": ["h1", "h2"],
             "iterations": iterations, "nic_bps": NIC_BPS}
        ],
        "schemes": ["ideal"],
    }
    res = run_config(cfg, out / lib_id, f"{lib_id}: {model} alone")
    ideal = res.schemes["ideal"]
    profile = ideal.profiles[lib_id]
    factor = NIC_BPS / BOTTLENECK_BPS
    from testbed.calibration import default_calibration_path, load_calibration
    from testbed.run import load_config

    job = load_config(cfg).jobs[0]
    cal = load_calibration(default_calibration_path(model))
    times = ideal.jobs[lib_id].iteration_times_s
    return {
        "id": lib_id,
        "iteration_time_s": profile.iteration_time_s,
        "phases": [
            {"start_s": p.start_s, "duration_s": p.duration_s, "rate_bps": p.rate_bps * factor}
            for p in profile.phases
        ],
        "provenance": {
            "source": "measured on the testbed: DDP comm-hook profile of the ideal run",
            "model": model,
            "calibration": f"testbed/calibrations/{model}.json",
            "calibration_provenance": cal.provenance,
            "calibration_note": cal.scale_note,
            "nic_bps": NIC_BPS,
            "emulated_link_bps": BOTTLENECK_BPS,
            "scale": job.scale,
            "measured_iteration_s": sum(times) / len(times),
            "workers": 2,
            "command": "sudo .venv/bin/python -m experiments.profile_library",
        },
    }


def merged(old: list[dict[str, Any]], measured: dict[str, dict[str, Any]]) -> list[dict]:
    """The library with the measured entries in place of the old ones; the others kept,
    labelled ``assumed`` where they carry no provenance."""
    library = []
    for entry in old:
        if entry["id"] in measured:
            library.append(measured[entry["id"]])
        else:
            prov = entry.get("provenance") or {
                "source": "assumed: the shape of the CASSINI paper's profile, not measured here"
            }
            library.append({**entry, "provenance": prov})
    return library


def run_library(run: Run) -> None:
    old = json.loads(LIBRARY.read_text())
    measured = {}
    for lib_id, model in MEASURED.items():
        measured[lib_id] = measure_entry(lib_id, model, run.args.iterations, run.out)
        progress(
            f"{lib_id}: {measured[lib_id]['iteration_time_s'] * 1e3:.1f} ms, "
            f"{len(measured[lib_id]['phases'])} phases"
        )
    text = json_text(merged(old, measured)) + "\n"  # strict: NaN / infinities as null
    if run.args.dry_run:
        print(text)
    else:
        LIBRARY.write_text(text)
        progress(f"wrote {LIBRARY}")


def check(args: Any) -> None:
    at_least(args.iterations, "--iterations")


EXPERIMENT = Experiment(
    "profile_library",
    __doc__,
    run_library,
    options=(
        iterations(20),
        option("--dry-run", action="store_true", help="print, do not write the library"),
    ),
    check=check,
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
