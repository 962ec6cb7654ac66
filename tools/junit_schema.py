"""Fetches the JUnit XML schema that Jenkins' xunit plugin publishes (junit-10.xsd, MIT licence), the
one CI readers check reports against, for the tests that validate accept's --junit files. PyPI is the
one registry a build machine reaches, and pytest's source release carries that schema for its own
tests: the file is taken from there and checked against its known digest, so the tests validate
against the published schema byte for byte, never a copy of ours.

    python tools/junit_schema.py TARGET
"""

import glob
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile

RELEASE = "pytest==8.3.3"
MEMBER = "testing/example_scripts/junit-10.xsd"
SHA256 = "a1a816f58d1bf95ebabf371994df0b9246dee66ea9572fbec4f9296f1b2c0ff6"


def main(target: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # One try, briefly: without a package index `make test` goes on without the schema.
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "--retries", "0",
                        "--timeout", "20", "-d", tmp, RELEASE], check=True)
        [sdist] = glob.glob(os.path.join(tmp, "pytest-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            [member] = [m for m in tar.getmembers() if m.name.endswith("/" + MEMBER)]
            data = tar.extractfile(member).read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        sys.exit(f"{MEMBER} of {RELEASE}: sha256 {digest}, expected {SHA256}")
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    with open(target + ".tmp", "wb") as f:
        f.write(data)
    os.replace(target + ".tmp", target)


if __name__ == "__main__":
    main(sys.argv[1])
