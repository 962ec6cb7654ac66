"""Run under mpirun: several commbench commands, each as a user types it
(the console script's main() with its argv), one after another in the same launched processes, so
that a test module pays the start of its ranks once rather than once per command. Each command's
stdout, stderr, exit status and whether torch was loaded by then on rank 0 go to OUT_DIR/ran-<name>.json.
A case whose first word is a .py file runs that test script instead, with that argv.

    python batched.py CASES.json OUT_DIR      CASES.json: {"name": ["allreduce", "--sizes", ...], ...}
"""

import contextlib
import io
import json
import os
import runpy
import sys

from commbench.cli import main
from commbench.launch.world import launch_rank


def run(argv: list) -> dict:
    script = argv[0].endswith(".py")
    sys.argv = argv if script else ["commbench", *argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if script:
                runpy.run_path(argv[0], run_name="__main__")
            else:
                main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    # Whether torch was loaded by then: a rank measuring host memory over MPI must not load it.
    return {"argv": argv, "returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
            "torch_loaded": "torch" in sys.modules}


if __name__ == "__main__":
    cases_path, out_dir = sys.argv[1], sys.argv[2]
    with open(cases_path) as f:
        cases = json.load(f)
    for name, argv in cases.items():
        got = run(argv)
        if launch_rank() == 0:
            with open(os.path.join(out_dir, f"ran-{name}.json"), "w") as f:
                json.dump(got, f)
