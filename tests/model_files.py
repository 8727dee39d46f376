"""Writing the test models' files (tests/*_models.py).

Criterion runs a suite's tests two at a time, and ctest two suites at a
time; several tests regenerate the same models while another may be
reading them. Each file is written whole under a temporary name and
renamed over the old one, so a reader sees the old bytes or the new ones
(the same: the models are seeded), never half a file.
"""
import os


def write_whole(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
