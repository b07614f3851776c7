"""The control-plane build is safe to start from two checkouts at once (it locks its cache)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import REPO

# Stands in for `go build -o OUT PKG`: writes OUT at once, then takes a while, like a
# real build writing its output; two unlocked builds would both write NAME.tmp.
FAKE_GO = """#!/usr/bin/env bash
while [[ $# -gt 0 ]]; do
    if [[ "$1" == "-o" ]]; then out="$2"; shift; fi
    shift
done
printf '#!/bin/sh\\n' > "$out"
chmod +x "$out"
sleep 0.5
"""


def test_two_concurrent_builds_both_succeed(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "go").write_text(FAKE_GO)
    (tools / "go").chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}", "SPECFLEET_CACHE": str(tmp_path)}
    script = str(REPO / "e2e" / "build-controlplane.sh")
    builds = [
        subprocess.Popen([script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    results = [(b.communicate(timeout=60), b.returncode) for b in builds]
    for (out, err), code in results:
        assert code == 0, err.decode()
        bin_dir = Path(out.decode().strip().splitlines()[-1])
        built = sorted(p.name.split("-")[0] for p in bin_dir.iterdir())
        assert built == ["crdcheck", "etcd", "helm", "kube", "kube", "kube", "podcheck"]
    assert any(b"waiting for it" in err for (_, err), _ in results)
